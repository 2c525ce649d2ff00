# Sourced by the scripts that run on a lent GPU machine: what the machine lacks, carried in the checkout and installed
# once per machine into /tmp/site (a warm machine keeps it between commands), and worldtune imported from the checkout.
#   .whl/*.whl      wheels (diffusers, peft and the small ones; see docs/benchmarks.md for the list)
#   .av/av.tar.xz   PyAV's wheel unpacked and xz-packed (35 MB as a wheel, 24 MB packed): the dataset writer and
#                   prepare need it and the machines lack it. The carry limit (64 MiB with the checkout) leaves no
#                   room for it beside .whl, so carry .av in a call of its own first: the next call on the warm
#                   machine finds it installed.
mkdir -p /tmp/site
if [ -f .av/av.tar.xz ] && [ ! -f /tmp/site/.av-ok ]; then
  tar -xJf .av/av.tar.xz -C /tmp/site && touch /tmp/site/.av-ok || return 1
fi
if compgen -G ".whl/*.whl" >/dev/null && [ ! -f /tmp/site/.ok ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || return 1
  touch /tmp/site/.ok
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
