"""The job lifecycle: post, admit, work, upload, submit, review, award (see states.py for the machines).

Importing this package does nothing by itself: `Core.build` plugs the job lifecycle into the agent lifecycle
(`lifecycle_hooks.register`), so every process that builds a Core checks work in flight."""
