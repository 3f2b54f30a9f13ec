# Destructive operations wait for a human.
#
# A tool call whose action starts with a destructive verb is held by the
# sidecar until someone answers on the approvals queue. No answer within the
# organization's `hitl_timeout_seconds` (or a rejection) applies
# `hitl_fallback`: here, deny.
package warden.examples.destructive_needs_approval

import rego.v1

destructive_verbs := ["delete_", "destroy_", "purge_", "remove_", "wipe_"]

decision := "approval_required" if {
	some verb in destructive_verbs
	startswith(input.action, verb)
}

reason := sprintf("%s is destructive: a human approves it first", [input.action])

hitl_fallback := "deny"
