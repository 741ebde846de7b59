# A Docker engine in a container: an extra Swarm node on one machine (the swarm test, trying a
# multi-node stack without more machines). Run privileged with a volume on /var/lib/docker:
#   docker run -d --privileged -v /var/lib/docker rlstack/swarm-node
# Its engine listens on tcp://<container>:2375 without TLS: keep it on a private network.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends docker.io iptables ca-certificates \
 && rm -rf /var/lib/apt/lists/*
VOLUME /var/lib/docker
EXPOSE 2375
HEALTHCHECK --interval=2s --timeout=3s --start-period=10s --retries=30 CMD docker info >/dev/null
ENTRYPOINT ["dockerd", "--host=unix:///var/run/docker.sock", "--host=tcp://0.0.0.0:2375", "--tls=false"]
