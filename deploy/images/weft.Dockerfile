# weft:dev, built by build.sh from a local Debian base and host-built
# binaries; the same runtime as deploy/Dockerfile's.
ARG BASE
FROM ${BASE}
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/weft weft
COPY bin/ /usr/local/bin/
COPY config/ /etc/weft/
USER weft
WORKDIR /var/lib/weft
EXPOSE 7700 9464
CMD ["coordinator", "--config", "/etc/weft/coordinator.toml"]
