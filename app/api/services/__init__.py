"""What each route computes, as plain functions: a validated request model in, the engine's
result out. The API routes shape these results as JSON; the pages validate their forms
with the same request models and call the same functions. No HTTP here, so a page view is
never an API request."""
