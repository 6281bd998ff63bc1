# Sourced by demo.sh and test.sh: make .venv (installing Debian's python3-venv if needed) and install streamdp.
# Usage: ensure_venv EXTRA   (EXTRA = "", "[demo]" or "[test]"). Versions are pinned by constraints.txt (the set
# CI tested; regenerate it from a working venv: scripts/constraints.sh).
ensure_venv() {
  local extra="$1" py="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    if ! "$py" -m venv .venv >/dev/null 2>&1; then
      rm -rf .venv
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing python3-venv (Debian package) ..." >&2
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv) >/dev/null
        "$py" -m venv .venv
      else
        echo "python3 -m venv failed: install Debian's python3-venv (sudo apt-get install python3-venv)" >&2
        return 1
      fi
    fi
  fi
  local stamp=".venv/.streamdp-installed${extra}"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
    .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".${extra}"
    touch "$stamp"
  fi
}
