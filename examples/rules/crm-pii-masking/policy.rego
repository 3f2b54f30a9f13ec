# Personal data in CRM tool arguments is masked before the tool sees it.
#
# The call goes through, but the named arguments are rewritten: an email
# keeps its domain, a phone number its last four digits, and a national id
# nothing. The rule matches only when one of those arguments is present: a
# mask with nothing to mask would be a deny.
#
# One body per argument (Rego ORs a rule's bodies) keeps the rule in the
# engine's native subset; a `some name in {...}` loop would not be.
package warden.examples.crm_pii_masking

import rego.v1

decision := "mask" if {
	input.target_app in {"crm", "salesforce", "hubspot"}
	input.context.email
}

decision := "mask" if {
	input.target_app in {"crm", "salesforce", "hubspot"}
	input.context.to
}

decision := "mask" if {
	input.target_app in {"crm", "salesforce", "hubspot"}
	input.context.phone
}

decision := "mask" if {
	input.target_app in {"crm", "salesforce", "hubspot"}
	input.context.ssn
}

reason := "personal data is masked before it reaches CRM tools"

redactions := [
	{"field": "email", "mode": "email"},
	{"field": "to", "mode": "email"},
	{"field": "phone", "mode": "partial", "keepLast": 4},
	{"field": "ssn", "mode": "full"},
]
