# A host as the GPU host check expects one, on CPU: a Python with torch and transformers (and what
# they require) and nothing of ours. tests/container/test_gpu_host_check.py runs
# scripts/gpu-host-check.sh in it with no network. Build context: the repository root.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
# What the host has: the wheel folder's manifest.json `host_provides`, at trainer-cpu.lock's pins
# (torch==2.13.0+cpu from ./wheelhouse, `make wheelhouse`).
ARG HOST_PACKAGES="torch transformers"
COPY docker/requirements/trainer-cpu.lock /tmp/trainer-cpu.lock
COPY wheelhouse/ /tmp/wheelhouse/
RUN python3 -m venv /opt/host \
 && python3 -c "import re, sys; key = lambda n: re.sub(r'[-_.]+', '-', n.lower()); want = {key(n) for n in sys.argv[1].split()}; print('\n'.join(l.strip() for l in open('/tmp/trainer-cpu.lock') if re.match(r'^[A-Za-z0-9]', l) and key(l.split('==')[0]) in want))" "$HOST_PACKAGES" > /tmp/host.txt \
 && /opt/host/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps --find-links /tmp/wheelhouse -r /tmp/host.txt \
 && /opt/host/bin/python3 -c "import torch, transformers" \
 && rm -rf /tmp/wheelhouse /tmp/host.txt
ENV PATH=/opt/host/bin:$PATH PYTHONUNBUFFERED=1
WORKDIR /root
