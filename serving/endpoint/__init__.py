"""An endpoint that is already running (tierbench starts no server): measured like a launched one."""
