# Sourced by the scripts that run on a GPU machine without internet: carried_wheels DIR installs the wheels
# carried in .whl/ (tools/fetch_wheels.sh) into DIR (a folder named site-packages, as quack-kernels needs:
# tools/device_run.sh), and returns 2 where pip fails; nothing where .whl/ holds none.
carried_wheels() {
    if compgen -G ".whl/*.whl" >/dev/null; then
        python3 -m pip install -q --no-index --no-deps --target "$1" .whl/*.whl || return 2
    fi
}
