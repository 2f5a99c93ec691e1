# haproxy from Debian, with docker/haproxy.cfg: the balancer of docker/compose.ha.yaml.
#   podman build --format docker -f docker/haproxy.Dockerfile -t lance-gateway-haproxy docker
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends haproxy \
 && rm -rf /var/lib/apt/lists/*
COPY haproxy.cfg /usr/local/etc/haproxy/haproxy.cfg
EXPOSE 2333
CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
