"""A small MCP tool server for Warden's end-to-end tests (official MCP Python SDK).

Serves Streamable HTTP at /mcp on 127.0.0.1, on a port the OS picks; prints
`listening on 127.0.0.1:PORT` once ready. Every tools/call it receives is
appended as a JSON line to the file named by $RECEIVED_LOG, so tests can see
exactly what reached the upstream.
"""

import asyncio
import json
import os
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

RECEIVED = os.environ.get("RECEIVED_LOG")

server = MCPServer("crm")


def record(tool: str, arguments: dict) -> None:
    if RECEIVED:
        with open(RECEIVED, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool()
def get_customer(id: str) -> str:
    """Reads a customer."""
    record("get_customer", {"id": id})
    return json.dumps({"id": id, "name": "Ana", "email": "ana@example.com", "ssn": "123-45-6789"})


@server.tool()
def delete_customer(id: str) -> str:
    """Deletes a customer."""
    record("delete_customer", {"id": id})
    return "deleted"


@server.tool()
def send_email(to: str, body: str) -> str:
    """Sends an email."""
    record("send_email", {"to": to, "body": body})
    return f"sent to {to}"


@server.resource("crm://notes/{id}")
def note(id: str) -> str:
    """A customer note."""
    return f"note {id}: call back at 555-010-9999, api key sk-live-abcdefghijklmnop1234"


@server.prompt()
def follow_up(name: str) -> str:
    """A follow-up prompt."""
    return f"Write a follow-up to {name} (card 4111 1111 1111 1111)."


async def main() -> None:
    json_response = os.environ.get("JSON_RESPONSE") == "1"
    app = server.streamable_http_app(json_response=json_response)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # PORT picks the port (the README's guide uses 7100); 0: the OS picks.
    sock.bind(("127.0.0.1", int(os.environ.get("PORT", "0"))))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning")
    srv = uvicorn.Server(config)
    print(f"listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    await srv.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
