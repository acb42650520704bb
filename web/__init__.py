"""Web pages: the webchat page, and later the panel."""
