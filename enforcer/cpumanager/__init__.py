"""The CPU manager: the `none` and `static` policies, their options and state, and CPU selection."""
