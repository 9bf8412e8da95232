"""MCP tools: the servers a user adds (toolbox/servers.py), the host that runs and calls them
(toolbox/host.py, one connection each in toolbox/mcp_link.py), their tools in OpenAI's shape
(toolbox/tool_catalog.py). The `mcp` SDK is imported only when a host starts a server."""

from draftscope.toolbox.host import ToolHost, probe_server
from draftscope.toolbox.servers import McpServer, read_mcp_config, servers_from_json, servers_to_json
from draftscope.toolbox.tool_catalog import openai_tools
from draftscope.toolbox.tool_results import ToolInfo, ToolOutcome

__all__ = [
    "McpServer",
    "ToolHost",
    "ToolInfo",
    "ToolOutcome",
    "openai_tools",
    "probe_server",
    "read_mcp_config",
    "servers_from_json",
    "servers_to_json",
]
