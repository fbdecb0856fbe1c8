"""The one exception type for mistakes a user can fix (bad paths, bad settings, bad data)."""


class UsageError(Exception):
  """An error the user can fix; its message names the cause and the fix."""
