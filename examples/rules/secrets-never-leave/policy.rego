# Secrets never leave in tool results.
#
# Every tool result, resource and rendered prompt is a retrieval. This rule
# redacts the shapes of credentials wherever they appear in the content
# before the agent sees it. A result with no secret in it passes unchanged.
package warden.examples.secrets_never_leave

import rego.v1

decision := "redact" if input.operation in {"tool_call", "retrieve", "prompt_render"}

reason := "credentials are removed from what agents read"

redactions := [
	# API keys of common providers.
	{"pattern": "sk-(live|test|proj)-[A-Za-z0-9_-]{8,}", "mode": "full"},
	{"pattern": "AKIA[0-9A-Z]{16}", "mode": "full"},
	{"pattern": "gh[pousr]_[A-Za-z0-9]{20,}", "mode": "full"},
	# Private key blocks.
	{"pattern": "-----BEGIN [A-Z ]*PRIVATE KEY-----[^-]*-----END [A-Z ]*PRIVATE KEY-----", "mode": "full"},
	# Fields that hold secrets, whatever their shape.
	{"field": "password", "mode": "full"},
	{"field": "api_key", "mode": "full"},
	{"field": "ssn", "mode": "full"},
]
