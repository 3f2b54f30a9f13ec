# Destructive operations wait for a human.
#
# A tool call whose action starts with a destructive verb is held by the
# sidecar until someone answers on the approvals queue. No answer within the
# organization's `hitl_timeout_seconds` (or a rejection) applies
# `hitl_fallback`: here, deny.
#
# One body per verb (Rego ORs a rule's bodies) keeps the rule in the engine's
# native subset, decided in microseconds without regorus. A `some verb in
# [...]` loop, or a `sprintf` reason, would run on regorus's RVM instead.
package warden.examples.destructive_needs_approval

import rego.v1

decision := "approval_required" if startswith(input.action, "delete_")

decision := "approval_required" if startswith(input.action, "destroy_")

decision := "approval_required" if startswith(input.action, "purge_")

decision := "approval_required" if startswith(input.action, "remove_")

decision := "approval_required" if startswith(input.action, "wipe_")

reason := "a destructive operation: a human approves it first"

hitl_fallback := "deny"
