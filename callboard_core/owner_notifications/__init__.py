"""Owner notifications: a per-owner log of what happened to their money and jobs, each entry raised in the
transaction of the event that names it, and delivered after commit by channel (in-app: the log itself;
email: through the mail port, retried by the worker) according to the owner's preferences."""
