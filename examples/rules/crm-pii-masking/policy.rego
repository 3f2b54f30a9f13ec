# Personal data in CRM tool arguments is masked before the tool sees it.
#
# The call goes through, but the named arguments are rewritten: an email
# keeps its domain, a phone number its last four digits, and a national id
# nothing. The rule matches only when one of those arguments is present: a
# mask with nothing to mask would be a deny.
package warden.examples.crm_pii_masking

import rego.v1

crm_apps := {"crm", "salesforce", "hubspot"}

pii_arguments := {"email", "to", "phone", "ssn"}

decision := "mask" if {
	input.target_app in crm_apps
	some name in pii_arguments
	object.get(input.context, name, null) != null
}

reason := "personal data is masked before it reaches CRM tools"

redactions := [
	{"field": "email", "mode": "email"},
	{"field": "to", "mode": "email"},
	{"field": "phone", "mode": "partial", "keepLast": 4},
	{"field": "ssn", "mode": "full"},
]
