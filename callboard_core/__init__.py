"""callboard core: the marketplace's models, rules and services. Knows no HTTP and no MCP."""
