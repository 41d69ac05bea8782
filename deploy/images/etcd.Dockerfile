# weft-etcd:dev, built by build.sh: etcd from Debian's packages on the local
# Debian base, its data in /var/lib/etcd.
ARG BASE
FROM ${BASE}
RUN useradd --system --uid 10002 --user-group --no-create-home --home-dir /var/lib/etcd etcd \
    && install -d -m 0700 -o etcd -g etcd /var/lib/etcd
COPY bin/ /usr/local/bin/
USER etcd
WORKDIR /var/lib/etcd
EXPOSE 2379 2380
CMD ["etcd", "--data-dir=/var/lib/etcd"]
