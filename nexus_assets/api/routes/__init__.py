"""One module per resource; each route is a few lines over a service."""
