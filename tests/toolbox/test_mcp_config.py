"""The MCP servers a user adds, as data: McpServer's checks and Settings' dict, the `mcpServers` JSON
that LM Studio, Claude Desktop and Cursor write (import, export, the terminal's --mcp file)."""

import json

import pytest

from draftscope.toolbox import McpServer, read_mcp_config, servers_from_json, servers_to_json

LM_STUDIO = """{
  "mcpServers": {
    "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"],
              "env": {"DEBUG": "1"}},
    "hf": {"url": "https://huggingface.co/mcp", "headers": {"Authorization": "Bearer abc"}},
    "web": {"type": "streamable-http", "url": "http://127.0.0.1:9000/mcp", "disabled": true,
            "alwaysAllow": ["fetch"]}
  }
}"""


def test_the_mcpservers_json_of_lm_studio_becomes_servers():
    files, hf, web = servers_from_json(LM_STUDIO)
    assert (files.name, files.kind, files.command) == ("files", "stdio", "npx")
    assert files.args == ("-y", "@modelcontextprotocol/server-filesystem", "/home/me")
    assert files.env == {"DEBUG": "1"} and files.enabled
    assert (hf.kind, hf.url, hf.headers) == ("http", "https://huggingface.co/mcp", {"Authorization": "Bearer abc"})
    assert (web.kind, web.enabled, web.always_allowed) == ("http", False, ("fetch",))


def test_export_is_read_back_as_the_same_servers():
    servers = servers_from_json(LM_STUDIO)
    exported = servers_to_json(servers)
    assert set(json.loads(exported)["mcpServers"]) == {"files", "hf", "web"}
    assert servers_from_json(exported) == servers


def test_settings_dict_round_trip_and_unknown_keys_left():
    server = McpServer(
        "files", command="uvx", args=("mcp-files",), env={"A": "b"}, disabled_tools=("rm",), always_allowed=("ls",)
    )
    as_dict = server.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert McpServer.from_dict(as_dict) == server
    assert McpServer.from_dict({**as_dict, "a_newer_field": 1}) == server
    assert McpServer.from_dict({"name": "web", "url": "http://x/mcp"}).kind == "http"


@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected an object"),
        ('{"servers_by_name": {}}', 'no "mcpServers"'),
        ('{"mcpServers": []}', '"mcpServers" must be an object'),
        ('{"mcpServers": {"files": "npx files"}}', "server 'files' must be an object"),
        ('{"mcpServers": {"files": {"command": "npx", "args": "-y files"}}}', "server 'files': 'args' must be a list"),
        (
            '{"mcpServers": {"files": {"command": "npx", "env": {"A": 1}}}}',
            "server 'files': 'env' must map names to text",
        ),
        ('{"mcpServers": {"files": {"args": ["x"]}}}', "server 'files': has neither a \"command\""),
        ('{"mcpServers": {"files": {"command": "a", "url": "http://x"}}}', "server 'files': has both"),
        ('{"mcpServers": {"web": {"url": "ftp://x/mcp"}}}', "server 'web': \"url\" must start with http"),
        ('{"mcpServers": {"web": {"type": "sse", "url": "http://x/sse"}}}', "server 'web' uses SSE"),
        ('{"mcpServers": {"web": {"type": "ws", "url": "http://x"}}}', "server 'web': unknown \"type\" 'ws'"),
        ('{"mcpServers": {"web": {"url": "http://x", "disabled": "yes"}}}', "server 'web': \"disabled\" must be true"),
        ('{"mcpServers": {"": {"command": "x"}}}', "needs a name"),
    ],
)
def test_each_malformed_shape_is_a_value_error_naming_it(text, words):
    with pytest.raises(ValueError) as caught:
        servers_from_json(text)
    assert words in str(caught.value)


def test_problems_name_the_server_and_the_field():
    assert McpServer("ok", command="x").problems() == []
    assert McpServer("", command="x").problems() == ["a server needs a name"]
    (both,) = McpServer("two", command="x", url="http://y").problems()
    assert both.startswith("server 'two':") and '"command"' in both and '"url"' in both
    assert any('"name"' in p for p in McpServer(" padded ", command="x").problems())
    with pytest.raises(ValueError, match="server 'f': 'enabled' must be true or false"):
        McpServer.from_dict({"name": "f", "command": "x", "enabled": "yes"})
    with pytest.raises(ValueError, match="server 'f': 'disabled_tools' must be a list of text"):
        McpServer.from_dict({"name": "f", "command": "x", "disabled_tools": "rm"})


def test_the_terminal_config_file_is_named_in_its_errors(tmp_path):
    good = tmp_path / "mcp.json"
    good.write_text(LM_STUDIO, encoding="utf-8")
    assert [s.name for s in read_mcp_config(str(good))] == ["files", "hf", "web"]
    with pytest.raises(ValueError, match=r"missing\.json: no such file"):
        read_mcp_config(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": {}}}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json: server 'x': has neither"):
        read_mcp_config(str(bad))
