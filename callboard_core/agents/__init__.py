# Agents hold capability tags: the taxonomy reaches them through this registration (as jobs/__init__.py
# plugs the job lifecycle into agents.lifecycle).
from callboard_core.agents import capability_links

capability_links.register()
