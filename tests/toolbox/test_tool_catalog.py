"""The servers' tools as the model sees them (OpenAI's shape, names it accepts, the way back to the
server), and an MCP result as the text the model reads."""

import base64
import re

from mcp.types import CallToolResult, EmbeddedResource, ImageContent, ResourceLink, TextContent, TextResourceContents

from draftscope.toolbox import ToolInfo, openai_tools
from draftscope.toolbox.tool_results import result_text

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def test_tools_keep_their_names_and_clashes_name_their_server():
    infos = [
        ToolInfo("files", "read", "Read a file.", SCHEMA),
        ToolInfo("web", "read", "Read a page.", SCHEMA),
        ToolInfo("web", "fetch", "Fetch a URL.", {}),
        ToolInfo("my server", "look up!", "Odd names.", SCHEMA),
    ]
    tools, route = openai_tools(infos)
    names = [t["function"]["name"] for t in tools]
    assert names == ["files_read", "web_read", "fetch", "my_server_look_up_"]
    assert route == {
        "files_read": ("files", "read"),
        "web_read": ("web", "read"),
        "fetch": ("web", "fetch"),
        "my_server_look_up_": ("my server", "look up!"),
    }
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", n) for n in names)
    assert tools[0] == {
        "type": "function",
        "function": {"name": "files_read", "description": "Read a file.", "parameters": SCHEMA},
    }
    assert tools[2]["function"]["parameters"] == {"type": "object", "properties": {}}


def test_names_stay_unique_and_short_whatever_the_servers_call_them():
    long = "x" * 80
    infos = [
        ToolInfo("a", "a_b", "", {}),
        ToolInfo("a_b", "", "", {}),
        ToolInfo("a", "b", "", {}),
        ToolInfo("s", long, "", {}),
        ToolInfo("s", long + "y", "", {}),
    ]
    tools, route = openai_tools(infos)
    names = [t["function"]["name"] for t in tools]
    assert len(set(names)) == len(names) == len(route) == 5
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", n) for n in names)
    assert {route[n] for n in names} == {(i.server, i.name) for i in infos}


def test_a_result_reads_as_text_with_images_and_resources_described():
    png = base64.b64encode(b"\x89PNG" + b"0" * 2000).decode()
    result = CallToolResult(
        content=[
            TextContent(type="text", text="first line\nsecond line"),
            ImageContent(type="image", data=png, mime_type="image/png"),
            EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///a.txt", text="inside a.txt")),
            ResourceLink(type="resource_link", name="b.txt", uri="file:///b.txt"),
        ]
    )
    assert result_text(result).splitlines() == [
        "first line",
        "second line",
        "[image: image/png, 2,004 bytes]",
        "inside a.txt",
        "[resource link: b.txt <file:///b.txt>]",
    ]
    assert result_text(CallToolResult(content=[], structured_content={"sum": 3})) == '{"sum": 3}'
