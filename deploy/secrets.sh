#!/bin/sh
# Makes what deploy/'s configurations need to run secured (SPEC 11): a CA,
# a certificate it signed for the coordinators, and three random tokens.
# Nothing of it is committed; run it once per cluster, before
# `docker-compose up`:
#
#   deploy/secrets.sh                 # into deploy/secrets/
#   deploy/secrets.sh DIR [NAME…]     # into DIR, the certificate also for NAME…
#
# It writes:
#   ca.pem               the CA's certificate: clients and workers trust it
#                        (weft --ca, WEFT_CA; the workers' [tls] ca)
#   server.pem, .key     the coordinators' certificate and key, for the names
#                        coordinator-a, coordinator-b, coordinator-c, localhost, 127.0.0.1
#                        and any NAME given
#   tokens.env           WEFT_ADMIN_TOKEN, WEFT_OPERATOR_TOKEN,
#                        WEFT_WORKER_TOKEN and WEFT_METRICS_TOKEN (a
#                        reader's, for Prometheus): the coordinators' secrets file
#                        (their [[tokens]] name these variables) and
#                        docker-compose's --env-file (the workers' token)
#   metrics.token        WEFT_METRICS_TOKEN alone, for prometheus.yml
#
# The CA's key is deleted once the certificate is signed: to add a name,
# run the script again (into an empty directory) and restart the cluster.
# The files are for the containers' user (uid 10001): run as root, the
# script gives them to that user, mode 0600; run as anyone else it leaves
# them readable by all, and says so.
set -eu

dir=${1:-$(dirname "$0")/secrets}
[ $# -gt 0 ] && shift
command -v openssl >/dev/null || { echo "secrets.sh: openssl is needed (apt-get install openssl)" >&2; exit 2; }
mkdir -p "$dir"
if [ -e "$dir/server.key" ]; then
    echo "secrets.sh: $dir already holds a key; remove the directory to make new ones" >&2
    exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

names="DNS:coordinator-a,DNS:coordinator-b,DNS:coordinator-c,DNS:localhost,IP:127.0.0.1"
for name in "$@"; do
    case $name in
        *[!0-9.]*) names="$names,DNS:$name" ;;
        *) names="$names,IP:$name" ;;
    esac
done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
    -subj "/CN=Weft cluster CA" -keyout "$work/ca.key" -out "$dir/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=weft-coordinator" -keyout "$dir/server.key" -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$names" > "$work/ext"
openssl x509 -req -in "$work/server.csr" -CA "$dir/ca.pem" -CAkey "$work/ca.key" \
    -CAserial "$work/ca.srl" -CAcreateserial -days 825 -extfile "$work/ext" -out "$dir/server.pem" 2>/dev/null

{
    echo "# Weft tokens, made by deploy/secrets.sh: keep this file secret."
    echo "WEFT_ADMIN_TOKEN=$(openssl rand -hex 32)"
    echo "WEFT_OPERATOR_TOKEN=$(openssl rand -hex 32)"
    echo "WEFT_WORKER_TOKEN=$(openssl rand -hex 32)"
    echo "WEFT_METRICS_TOKEN=$(openssl rand -hex 32)"
} > "$dir/tokens.env"
# Prometheus reads the metrics token (a reader's) from a file of its own.
sed -n 's/^WEFT_METRICS_TOKEN=//p' "$dir/tokens.env" > "$dir/metrics.token"

if [ "$(id -u)" = 0 ]; then
    # The containers' user (10001) owns the secrets; the CA and the
    # certificate stay readable by everyone (clients need ca.pem for
    # WEFT_CA), the key and the tokens by that user alone.
    chown -R 10001:10001 "$dir"
    chmod 0755 "$dir"
    chmod 0600 "$dir"/server.key "$dir"/tokens.env
    chmod 0644 "$dir"/ca.pem "$dir"/server.pem "$dir"/metrics.token
else
    chmod 0755 "$dir"
    chmod 0644 "$dir"/*
    echo "secrets.sh: not root, so the files stay yours and readable by every user of this machine (the containers' user must read them)" >&2
fi
echo "secrets.sh: wrote $dir/ca.pem, server.pem, server.key, tokens.env and metrics.token" >&2
