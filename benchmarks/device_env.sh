# Sourced by the scripts that run on a lent GPU machine: the wheels carried in .whl/ installed once per machine
# (into /tmp/site, which a warm machine keeps between commands), and worldtune imported from the checkout.
if [ ! -f /tmp/site/.ok ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || return 1
  touch /tmp/site/.ok
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
