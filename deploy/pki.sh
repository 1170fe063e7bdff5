#!/usr/bin/env bash
# deploy/pki.sh - the federation's X.509 PKI for mutual TLS (deploy/README-pki.md),
# made with the openssl CLI only.
#
#   deploy/pki.sh DIR --regions eu-west,us-east,ap-south [--operators alice,bob]
#                 [--aggregator-name NAME] [--days N] [--force] [--test-extras]
#
# See deploy/README-pki.md or --help.
set -euo pipefail
umask 022

prog=pki.sh
usage() {
    cat <<'EOF'
usage: deploy/pki.sh DIR --regions ID[,ID...] [--operators NAME[,NAME...]] [options]

Makes (or completes) the federation PKI in DIR:
  ca.crt, ca.key                 federation CA (ECDSA P-256, 10 years)
  server.crt, server.key         aggregator: SAN DNS:localhost, IP:127.0.0.1, DNS:NAME
  client-ID.crt, client-ID.key   one per region: CN=ID, SAN URI:fedagg://region/ID
  operator-NAME.crt, operator-NAME.key
                                 one per operator (the admin API, fedagg status/watch):
                                 CN=operator:NAME, SAN URI:fedagg://operator/NAME
Keys are ECDSA P-256 (PKCS#8 PEM), mode 0600; certificates 0644.

Idempotent: an existing key is never replaced (unless --force); a missing
certificate, or one that no longer matches its key or the CA, is reissued
with the existing key; everything else is left untouched.

options:
  --regions ID,ID,...       region ids: lower-case letters, digits and '-' (required,
                            unless --operators is given: e.g. adding an operator later)
  --operators NAME,...      operator names, same characters as region ids; an
                            operator's certificate is refused on the regions' API
                            and a region's on the admin API
  --aggregator-name NAME    extra DNS name (or IPv4 address) of the aggregator (default localhost)
  --days N                  validity of the server and client certificates (default 825)
  --force                   replace every key and certificate (a new CA: redeploy all)
  --test-extras             also make DIR/test/ with the bad certificates the transport
                            tests need: other-ca.{crt,key} and client-other-ca.{crt,key}
                            (a region certificate from another CA), client-expired.{crt,key}
                            (valid Jan 2020 only), server-wrong-name.{crt,key} (SAN
                            DNS:wrong.invalid only), client-unknown.{crt,key} (a region
                            not in the list: unknown-region), client-cn-only.{crt,key}
                            (CN=ID, no SAN URI; ID = the first region),
                            client-two-roles.{crt,key} (SAN URIs of the first region
                            and of an operator of the same name: refused)
  -h, --help                this text
EOF
}

die() {
    echo "$prog: $*" >&2
    exit 1
}

dir=""
regions=""
operators=""
agg_name="localhost"
days=825
force=0
extras=0
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) usage; exit 0 ;;
    --regions) [ $# -ge 2 ] || die "--regions needs a value"; regions="$2"; shift 2 ;;
    --regions=*) regions="${1#*=}"; shift ;;
    --operators) [ $# -ge 2 ] || die "--operators needs a value"; operators="$2"; shift 2 ;;
    --operators=*) operators="${1#*=}"; shift ;;
    --aggregator-name) [ $# -ge 2 ] || die "--aggregator-name needs a value"; agg_name="$2"; shift 2 ;;
    --aggregator-name=*) agg_name="${1#*=}"; shift ;;
    --days) [ $# -ge 2 ] || die "--days needs a value"; days="$2"; shift 2 ;;
    --days=*) days="${1#*=}"; shift ;;
    --force) force=1; shift ;;
    --test-extras) extras=1; shift ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "$dir" ] || die "more than one directory given ('$dir', '$1')"; dir="$1"; shift ;;
    esac
done
[ -n "$dir" ] || { usage >&2; die "no directory given"; }
[ -n "$regions" ] || [ -n "$operators" ] || die "--regions is required, e.g. --regions eu-west,us-east"
[ -n "$regions" ] || [ "$extras" = 0 ] || die "--test-extras needs --regions"
[[ "$days" =~ ^[1-9][0-9]{0,4}$ ]] || die "--days '$days' is not a number of days (1-99999)"
command -v openssl >/dev/null || die "openssl not found (apt-get install openssl)"

# Region ids end up in a URI and a file name: keep them plain.
region_list=()
operator_list=()
[ -z "$regions" ] || IFS=',' read -r -a region_list <<<"$regions"
[ -z "$operators" ] || IFS=',' read -r -a operator_list <<<"$operators"
for id in "${region_list[@]}"; do
    [[ "$id" =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] ||
        die "region id '$id' must be lower-case letters, digits and '-' (at most 63, no '-' at the ends)"
done
for id in "${operator_list[@]}"; do
    [[ "$id" =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] ||
        die "operator name '$id' must be lower-case letters, digits and '-' (at most 63, no '-' at the ends)"
done
if [[ "$agg_name" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    agg_san="IP:$agg_name"
elif [[ "$agg_name" =~ ^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$ ]]; then
    agg_san="DNS:$agg_name"
else
    die "--aggregator-name '$agg_name' is neither a DNS name nor an IPv4 address"
fi
server_san="DNS:localhost,IP:127.0.0.1"
[ "$agg_san" = "DNS:localhost" ] || [ "$agg_san" = "IP:127.0.0.1" ] || server_san="$server_san,$agg_san"

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
work=$(mktemp -d "$dir/.pki.XXXXXX")
trap 'rm -rf "$work"' EXIT

changed=0
note() { echo "$prog: $*"; }

# A random positive 128-bit serial (RFC 5280 4.1.2.2: at most 20 octets).
serial() { echo "0x$(openssl rand -hex 16 | sed 's/^./4/')"; }

# new_key PATH: an ECDSA P-256 key, written 0600 and moved into place.
new_key() {
    local tmp
    tmp="$work/$(basename "$1").new"
    (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
        -pkeyopt ec_param_enc:named_curve -out "$tmp" 2>"$work/err") ||
        die "openssl genpkey failed for $1: $(cat "$work/err")"
    chmod 0600 "$tmp"
    mv -f "$tmp" "$1"
}

# ensure_key PATH: makes the key if missing (or --force); returns 0 when new.
ensure_key() {
    if [ "$force" = 1 ] || [ ! -s "$1" ]; then
        new_key "$1"
        note "new key $1"
        changed=1
        return 0
    fi
    # An existing key must stay private, and be a key.
    chmod 0600 "$1"
    openssl pkey -in "$1" -noout 2>/dev/null || die "$1 exists but is not a readable private key (remove it or use --force)"
    return 1
}

# cert_matches CERT KEY CA: the certificate exists, holds KEY's public key,
# verifies against CA and is valid for at least 30 more days.
cert_matches() {
    local crt="$1" key="$2" ca="$3"
    [ -s "$crt" ] || return 1
    [ "$(openssl x509 -in "$crt" -noout -pubkey 2>/dev/null)" = "$(openssl pkey -in "$key" -pubout 2>/dev/null)" ] || return 1
    openssl verify -CAfile "$ca" "$crt" >/dev/null 2>&1 || return 1
    openssl x509 -in "$crt" -noout -checkend $((30 * 86400)) >/dev/null 2>&1 || return 1
}

# The X.509 v3 extensions of each kind of certificate.
write_ext() {
    cat >"$work/ext.cnf" <<EOF
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = $1

[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = $2

[client_cn_only]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
}

# make_ca KEY CRT CN: a self-signed CA certificate for KEY.
make_ca() {
    openssl req -new -x509 -key "$1" -sha256 -days 3650 -subj "/O=fedagg federation/CN=$3" \
        -set_serial "$(serial)" -config "$work/req.cnf" -extensions ca \
        -out "$work/ca.new" 2>"$work/err" || die "openssl req (CA $3) failed: $(cat "$work/err")"
    chmod 0644 "$work/ca.new"
    mv -f "$work/ca.new" "$2"
}

# issue KEY CRT SUBJECT SECTION CAKEY CACRT [SAN]: signs KEY's certificate.
issue() {
    local key="$1" crt="$2" subj="$3" section="$4" cakey="$5" cacrt="$6" san="${7:-}"
    write_ext "${san:-DNS:unused.invalid}" "${san:-DNS:unused.invalid}"
    openssl req -new -key "$key" -subj "$subj" -config "$work/req.cnf" -out "$work/csr" \
        2>"$work/err" || die "openssl req (CSR for $crt) failed: $(cat "$work/err")"
    openssl x509 -req -in "$work/csr" -CA "$cacrt" -CAkey "$cakey" -set_serial "$(serial)" \
        -sha256 -days "$days" -extfile "$work/ext.cnf" -extensions "$section" \
        -out "$work/crt.new" 2>"$work/err" || die "openssl x509 (sign $crt) failed: $(cat "$work/err")"
    chmod 0644 "$work/crt.new"
    mv -f "$work/crt.new" "$crt"
    note "issued $crt ($subj${san:+, $san})"
    changed=1
}

# entity KEY CRT SUBJECT SECTION SAN: the key if missing, the certificate if
# missing or stale.
entity() {
    local key="$1" crt="$2"
    if ensure_key "$key" || ! cert_matches "$crt" "$key" "$dir/ca.crt"; then
        issue "$key" "$crt" "$3" "$4" "$dir/ca.key" "$dir/ca.crt" "$5"
    fi
}

cat >"$work/req.cnf" <<'EOF'
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF

# --- federation CA -----------------------------------------------------------
if ensure_key "$dir/ca.key" || [ ! -s "$dir/ca.crt" ] ||
    [ "$(openssl x509 -in "$dir/ca.crt" -noout -pubkey 2>/dev/null)" != "$(openssl pkey -in "$dir/ca.key" -pubout)" ] ||
    ! openssl x509 -in "$dir/ca.crt" -noout -checkend $((30 * 86400)) >/dev/null 2>&1; then
    make_ca "$dir/ca.key" "$dir/ca.crt" "fedagg federation CA"
    note "issued $dir/ca.crt (a new CA: every certificate below is reissued)"
    changed=1
fi

# --- aggregator (TLS server) ---------------------------------------------------
entity "$dir/server.key" "$dir/server.crt" "/O=fedagg federation/CN=$agg_name" server "$server_san"
# A changed --aggregator-name needs a new certificate for the same key.
if ! openssl x509 -in "$dir/server.crt" -noout -ext subjectAltName 2>/dev/null | tail -n +2 |
    tr ',' '\n' | sed 's/^ *//' | grep -qxF "${agg_san/#IP:/IP Address:}"; then
    issue "$dir/server.key" "$dir/server.crt" "/O=fedagg federation/CN=$agg_name" server \
        "$dir/ca.key" "$dir/ca.crt" "$server_san"
fi

# --- one client certificate per region ------------------------------------------
for id in "${region_list[@]}"; do
    entity "$dir/client-$id.key" "$dir/client-$id.crt" "/O=fedagg federation/OU=region/CN=$id" \
        client "URI:fedagg://region/$id"
done

# --- one client certificate per operator ----------------------------------------
# CN=operator:NAME (':' is in no region id) so that even a CN-only reading
# never takes an operator for a region.
for id in "${operator_list[@]}"; do
    entity "$dir/operator-$id.key" "$dir/operator-$id.crt" "/O=fedagg federation/OU=operator/CN=operator:$id" \
        client "URI:fedagg://operator/$id"
done

# --- the bad certificates of the transport tests ----------------------------------
if [ "$extras" = 1 ]; then
    t="$dir/test"
    mkdir -p "$t"
    first="${region_list[0]}"
    # Another CA, and a region certificate it signed (same names as a real one).
    if ensure_key "$t/other-ca.key" || [ ! -s "$t/other-ca.crt" ] ||
        [ "$(openssl x509 -in "$t/other-ca.crt" -noout -pubkey 2>/dev/null)" != "$(openssl pkey -in "$t/other-ca.key" -pubout)" ]; then
        make_ca "$t/other-ca.key" "$t/other-ca.crt" "not the fedagg federation CA"
        note "issued $t/other-ca.crt"
        changed=1
    fi
    if ensure_key "$t/client-other-ca.key" || ! cert_matches "$t/client-other-ca.crt" "$t/client-other-ca.key" "$t/other-ca.crt"; then
        issue "$t/client-other-ca.key" "$t/client-other-ca.crt" "/O=fedagg federation/OU=region/CN=$first" \
            client "$t/other-ca.key" "$t/other-ca.crt" "URI:fedagg://region/$first"
    fi
    # Expired: issued by the federation CA, valid only in January 2020.
    # openssl x509 -req in OpenSSL 3.0 cannot backdate; openssl ca can
    # (-startdate/-enddate), with a throw-away database.
    if ensure_key "$t/client-expired.key" || [ ! -s "$t/client-expired.crt" ] ||
        [ "$(openssl x509 -in "$t/client-expired.crt" -noout -pubkey 2>/dev/null)" != "$(openssl pkey -in "$t/client-expired.key" -pubout)" ] ||
        ! openssl verify -no_check_time -CAfile "$dir/ca.crt" "$t/client-expired.crt" >/dev/null 2>&1; then
        mkdir -p "$work/cadb"
        : >"$work/cadb/index.txt"
        write_ext "DNS:unused.invalid" "URI:fedagg://region/$first"
        cat >"$work/ca.cnf" <<EOF
[ca]
default_ca = fed
[fed]
database = $work/cadb/index.txt
new_certs_dir = $work/cadb
serial = $work/cadb/serial
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
[anything]
organizationName = optional
organizationalUnitName = optional
commonName = supplied
EOF
        openssl rand -hex 16 | sed 's/^./4/' >"$work/cadb/serial"
        openssl req -new -key "$t/client-expired.key" -subj "/O=fedagg federation/OU=region/CN=$first" \
            -config "$work/req.cnf" -out "$work/csr" 2>"$work/err" || die "openssl req failed: $(cat "$work/err")"
        openssl ca -batch -config "$work/ca.cnf" -cert "$dir/ca.crt" -keyfile "$dir/ca.key" \
            -startdate 20200101000000Z -enddate 20200201000000Z -extfile "$work/ext.cnf" \
            -extensions client -notext -in "$work/csr" -out "$work/crt.new" >/dev/null 2>"$work/err" ||
            die "openssl ca (expired certificate) failed: $(cat "$work/err")"
        chmod 0644 "$work/crt.new"
        mv -f "$work/crt.new" "$t/client-expired.crt"
        note "issued $t/client-expired.crt (valid 2020-01-01 to 2020-02-01 only)"
        changed=1
    fi
    if ensure_key "$t/server-wrong-name.key" || ! cert_matches "$t/server-wrong-name.crt" "$t/server-wrong-name.key" "$dir/ca.crt"; then
        issue "$t/server-wrong-name.key" "$t/server-wrong-name.crt" "/O=fedagg federation/CN=wrong.invalid" \
            server "$dir/ca.key" "$dir/ca.crt" "DNS:wrong.invalid"
    fi
    if ensure_key "$t/client-unknown.key" || ! cert_matches "$t/client-unknown.crt" "$t/client-unknown.key" "$dir/ca.crt"; then
        issue "$t/client-unknown.key" "$t/client-unknown.crt" "/O=fedagg federation/OU=region/CN=unknown-region" \
            client "$dir/ca.key" "$dir/ca.crt" "URI:fedagg://region/unknown-region"
    fi
    if ensure_key "$t/client-cn-only.key" || ! cert_matches "$t/client-cn-only.crt" "$t/client-cn-only.key" "$dir/ca.crt"; then
        issue "$t/client-cn-only.key" "$t/client-cn-only.crt" "/O=fedagg federation/OU=region/CN=$first" \
            client_cn_only "$dir/ca.key" "$dir/ca.crt" ""
    fi
    if ensure_key "$t/client-two-roles.key" || ! cert_matches "$t/client-two-roles.crt" "$t/client-two-roles.key" "$dir/ca.crt"; then
        issue "$t/client-two-roles.key" "$t/client-two-roles.crt" "/O=fedagg federation/OU=region/CN=$first" \
            client "$dir/ca.key" "$dir/ca.crt" "URI:fedagg://region/$first,URI:fedagg://operator/$first"
    fi
fi

if [ "$changed" = 0 ]; then
    note "$dir is complete, nothing changed"
else
    note "done: CA $dir/ca.crt, server $dir/server.crt ($server_san), regions: ${region_list[*]:-(none given)}${operators:+, operators: ${operator_list[*]}}"
fi
