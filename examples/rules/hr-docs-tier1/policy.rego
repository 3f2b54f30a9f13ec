# HR documents are retrieved only by tier1 agents.
#
# The rule matches every retrieval of an HR document. The tier check is the
# rule's own `trust_tier: "tier1"` field (see rule.json): when the rule
# matches, an agent whose assigned tier is below tier1 gets `deny` with
# reason code `TIER_MISMATCH`, and a tier1 agent gets `allow`.
package warden.examples.hr_docs_tier1

import rego.v1

decision := "allow" if input.resource_type in {"hr_document", "personnel_file", "payroll_record"}

reason := "HR documents: tier1 agents only"
