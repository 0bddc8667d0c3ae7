# Importing this package does nothing by itself: `Core.build` registers the agents' side of the capability
# taxonomy (`capability_links.register`), as it plugs the job lifecycle into the agent lifecycle.
