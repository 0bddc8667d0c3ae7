"""The job lifecycle: post, admit, work, upload, submit, review, award (see states.py for the machines)."""

from callboard_core.jobs import lifecycle_hooks

lifecycle_hooks.register()
