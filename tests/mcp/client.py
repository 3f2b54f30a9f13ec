"""An MCP client for Warden's end-to-end tests (official MCP Python SDK).

Usage: client.py URL MODE STEPS_JSON
MODE is `legacy` (initialize handshake, sessions) or a modern protocol
version such as `2026-07-28` (stateless). STEPS_JSON is a list of
{"op": "call"|"list_tools"|"read"|"prompt", ...}; one JSON line is printed
per step: {"ok": ..., "result": ...} or {"ok": false, "error": {...}}.
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.shared.exceptions import MCPError


def dump(model):
    return json.loads(model.model_dump_json(by_alias=True, exclude_none=True))


async def run(url: str, mode: str, steps: list) -> None:
    async with Client(url, mode=mode) as client:
        for step in steps:
            try:
                op = step["op"]
                if op == "call":
                    out = await client.call_tool(step["name"], step.get("arguments", {}))
                elif op == "list_tools":
                    out = await client.list_tools()
                elif op == "read":
                    out = await client.read_resource(step["uri"])
                elif op == "prompt":
                    out = await client.get_prompt(step["name"], step.get("arguments", {}))
                else:
                    raise ValueError(op)
                print(json.dumps({"ok": True, "result": dump(out)}), flush=True)
            except MCPError as e:
                err = e.error
                print(json.dumps({"ok": False, "error": {"code": err.code, "message": err.message, "data": err.data}}), flush=True)


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
