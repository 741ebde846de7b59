"""OpenCode environment service: sandboxed OpenCode rollouts behind a token-exact proxy."""
