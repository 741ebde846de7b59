#!/usr/bin/env bash
# Create or refresh the Python environment the test suite runs in (default: .venv).
# Re-installs only when a lock file or package definition changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
inputs=(docker/requirements/reasoning-gym-env.lock requirements/test.lock
        services/reasoning_gym_env/client/pyproject.toml services/reasoning_gym_env/server/pyproject.toml
        services/inference/client/pyproject.toml services/opencode_env/server/pyproject.toml
        services/opencode_env/client/pyproject.toml trainer/pyproject.toml)
stamp="$VENV/.rlstack-installed"
digest=$(cat "${inputs[@]}" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
  exit 0
fi
echo "make-test-venv: installing test dependencies into $VENV"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check 2> >(grep -v "^WARNING: Location" >&2) \
  -r docker/requirements/reasoning-gym-env.lock -r requirements/test.lock
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
  -e services/reasoning_gym_env/client -e services/reasoning_gym_env/server -e services/inference/client \
  -e services/opencode_env/server -e services/opencode_env/client
# A path entry, not an import hook: the repository root's trainer/ folder would otherwise shadow the
# package as a namespace package when tests run from the root.
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --config-settings editable_mode=compat -e trainer
echo "$digest" > "$stamp"
