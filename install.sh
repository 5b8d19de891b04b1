#!/usr/bin/env bash
# Install training-node-agent on a GPU node: one command, safe to run again (upgrades in place).
#
#   sudo ./install.sh                                   # from PyPI (or this source tree)
#   sudo ./install.sh --index-url https://mirrors.aliyun.com/pypi/simple/
#   sudo ./install.sh --wheelhouse /mnt/wheels          # offline node
#   sudo ./install.sh --web-config                      # TLS + basic auth on the metrics port
#   sudo ./install.sh --uninstall [--purge]
#
# What it does: creates the system user training-node-agent, builds a venv under
# /opt/training-node-agent, writes /etc/training-node-agent/agent.toml (an edited config is never
# overwritten: the new default lands beside it as agent.toml.new), creates
# /var/lib/training-node-agent, installs the hardened systemd unit, enables and starts it.
# Run with --help for every option.
set -euo pipefail

NAME=training-node-agent
SRC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MIN_PY=(3 11)

ROOT=/
PREFIX=/opt/$NAME
PYTHON=
PACKAGE=
WHEELHOUSE=
PIP_INDEX_ARGS=()
CONFIG_SRC=
START=1
ACTION=install
PURGE=0
WEB_CONFIG=0
WEB_USER=prometheus
WEB_CA_CERT=
WEB_CA_KEY=
WEB_PASSWORD_FILE=
WEB_DAYS=825

say() { printf '%s: %s\n' "install.sh" "$*"; }
die() {
	printf '%s: error: %s\n' "install.sh" "$*" >&2
	exit 1
}

usage() {
	cat <<EOF
Usage: $0 [options]

Install (default):
  --index-url URL        package index for pip (a mirror, e.g. https://mirrors.aliyun.com/pypi/simple/)
  --extra-index-url URL  an additional index (repeatable)
  --wheelhouse DIR       offline: install only from the wheels in DIR (the agent and its dependencies)
  --package SPEC         what pip installs (default: this source tree when install.sh sits in one,
                         otherwise "$NAME" from the index or wheelhouse)
  --python PATH          interpreter for the venv (default: the newest python3.X >= ${MIN_PY[0]}.${MIN_PY[1]} on PATH)
  --config FILE          default config to install (default: configs/agent.toml beside this script)
  --prefix DIR           where the venv goes (default: /opt/$NAME)
  --root DIR             install into DIR as if it were / (image builds, tests): the user goes into
                         DIR/etc/passwd when that file exists, the unit is enabled but not started
  --no-start             install and enable the unit but do not (re)start it

Securing the metrics port (docs/security.md):
  --web-config           write /etc/$NAME/web.yml (exporter-toolkit format): TLS with a certificate
                         for this node and a bcrypt basic-auth user, point agent.toml at it, and
                         print the matching Prometheus scrape_config; an existing web.yml is kept
  --web-user NAME        the basic-auth user (default: prometheus)
  --web-password-file F  use the password in F (one fleet password) instead of a random one
  --web-ca-cert FILE     sign the node certificate with this CA (with --web-ca-key), so Prometheus
  --web-ca-key FILE      needs one ca_file for the whole fleet; default: self-signed

Remove:
  --uninstall            stop and remove the service and the venv; keep config and state
  --purge                with --uninstall: also remove /etc/$NAME, /var/lib/$NAME and the user
EOF
}

while [ $# -gt 0 ]; do
	case "$1" in
	--index-url) PIP_INDEX_ARGS+=(--index-url "${2:?--index-url needs a URL}") && shift ;;
	--extra-index-url) PIP_INDEX_ARGS+=(--extra-index-url "${2:?--extra-index-url needs a URL}") && shift ;;
	--wheelhouse) WHEELHOUSE=${2:?--wheelhouse needs a directory} && shift ;;
	--package) PACKAGE=${2:?--package needs a pip requirement} && shift ;;
	--python) PYTHON=${2:?--python needs a path} && shift ;;
	--config) CONFIG_SRC=${2:?--config needs a file} && shift ;;
	--prefix) PREFIX=${2:?--prefix needs a directory} && shift ;;
	--root) ROOT=${2:?--root needs a directory} && shift ;;
	--no-start) START=0 ;;
	--web-config) WEB_CONFIG=1 ;;
	--web-user) WEB_USER=${2:?--web-user needs a name} && shift ;;
	--web-password-file) WEB_PASSWORD_FILE=${2:?--web-password-file needs a file} && shift ;;
	--web-ca-cert) WEB_CA_CERT=${2:?--web-ca-cert needs a file} && shift ;;
	--web-ca-key) WEB_CA_KEY=${2:?--web-ca-key needs a file} && shift ;;
	--uninstall) ACTION=uninstall ;;
	--purge) PURGE=1 ;;
	-h | --help) usage && exit 0 ;;
	*) usage >&2 && die "unknown option: $1" ;;
	esac
	shift
done

[ "$PURGE" = 1 ] && [ "$ACTION" != uninstall ] && die "--purge goes with --uninstall"
if [ -n "$WEB_CA_CERT$WEB_CA_KEY" ] && { [ -z "$WEB_CA_CERT" ] || [ -z "$WEB_CA_KEY" ]; }; then
	die "--web-ca-cert and --web-ca-key go together"
fi
case "$WEB_USER" in *[!A-Za-z0-9._-]* | "") die "--web-user: letters, digits, . _ - only" ;; esac
case "$PREFIX" in /*) ;; *) die "--prefix must be an absolute path, got $PREFIX" ;; esac
ROOT=$(cd "$ROOT" 2>/dev/null && pwd) || die "--root directory does not exist"
# $R prefixes every path we touch; empty for the live system
R=${ROOT%/}

UNIT_DIR=/etc/systemd/system
UNIT=$UNIT_DIR/$NAME.service
CONF_DIR=/etc/$NAME
STATE_DIR=/var/lib/$NAME
DIST_COPY=$PREFIX/share/agent.toml.dist # the default as installed, to tell an edited config apart

if [ "$(id -u)" != 0 ] && [ -z "$R" ]; then
	die "run as root (sudo $0 ...), or use --root DIR to stage into a directory"
fi

live_systemd() { [ -z "$R" ] && [ -d /run/systemd/system ]; }

has_passwd_db() { [ -f "$R/etc/passwd" ] && [ -f "$R/etc/group" ]; }

# useradd/groupadd/userdel on the staged root's /etc files: --prefix where shadow-utils has it
# (>= 4.9), else --root (chroot)
shadow_root_args() {
	[ -z "$R" ] && return 0
	if useradd --help 2>&1 | grep -q -- '--prefix'; then
		printf '%s\n' --prefix "$R"
	else
		printf '%s\n' --root "$R"
	fi
}

user_exists() { grep -q "^$NAME:" "$R/etc/passwd" 2>/dev/null; }
group_exists() { grep -q "^$NAME:" "$R/etc/group" 2>/dev/null; }

# numeric ids from the (possibly staged) passwd, so chown works inside a root the host does not know
owner_ids() { awk -F: -v n="$NAME" '$1 == n { print $3 ":" $4 }' "$R/etc/passwd"; }

# --- Python -----------------------------------------------------------------------------------------

python_instructions() {
	cat >&2 <<EOF

training-node-agent needs Python ${MIN_PY[0]}.${MIN_PY[1]} or newer with the venv module. Install it, then run this again
(it finds python3.11+ on PATH by itself, or pass --python /usr/bin/python3.11):

  Alibaba Cloud Linux 3:   sudo dnf install -y python3.11 python3.11-pip
  Ubuntu 22.04:            sudo apt-get update && sudo apt-get install -y python3.11 python3.11-venv
  Ubuntu 24.04, Debian 12: sudo apt-get install -y python3 python3-venv
  Rocky/Alma/CentOS Stream 8 or 9:
                           sudo dnf install -y python3.11 python3.11-pip
  CentOS 7:                no Python 3.11 package exists; move the node to Rocky/Alma 8+ or
                           Alibaba Cloud Linux 3, or pass --python to a standalone build
EOF
}

py_ok() { "$1" -c "import sys; sys.exit(0 if sys.version_info[:2] >= (${MIN_PY[0]}, ${MIN_PY[1]}) else 1)" 2>/dev/null; }

find_python() {
	if [ -n "$PYTHON" ]; then
		command -v "$PYTHON" >/dev/null 2>&1 || {
			python_instructions
			die "--python $PYTHON: not found"
		}
		py_ok "$PYTHON" || {
			python_instructions
			die "$PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo '?'); ${MIN_PY[0]}.${MIN_PY[1]}+ is required"
		}
		return
	fi
	local c
	for c in python3.14 python3.13 python3.12 python3.11 python3; do
		if command -v "$c" >/dev/null 2>&1 && py_ok "$c"; then
			PYTHON=$(command -v "$c")
			return
		fi
	done
	python_instructions
	die "no Python ${MIN_PY[0]}.${MIN_PY[1]}+ found (python3 is $(python3 -c 'import platform; print(platform.python_version())' 2>/dev/null || echo 'absent'))"
}

check_venv_module() {
	"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null && return
	python_instructions
	die "$PYTHON lacks the venv/ensurepip modules (Debian/Ubuntu: the python3.X-venv package)"
}

# --- install steps ------------------------------------------------------------------------------------

create_user() {
	if [ -n "$R" ] && ! has_passwd_db; then
		say "user: $R/etc/passwd does not exist; not creating user $NAME in the staged root"
		return
	fi
	local args
	mapfile -t args < <(shadow_root_args)
	group_exists || groupadd --system "${args[@]}" "$NAME"
	if user_exists; then
		say "user: $NAME exists"
		return
	fi
	local nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	useradd --system "${args[@]}" --gid "$NAME" --home-dir "$STATE_DIR" --no-create-home \
		--shell "$nologin" --comment "training-node-agent daemon" "$NAME"
	say "user: created system user $NAME (add operators to group $NAME for the control socket)"
}

pip_install() {
	local venv=$R$PREFIX
	if [ -x "$venv/bin/python" ] && ! py_ok "$venv/bin/python"; then
		say "venv: $venv has an old Python; rebuilding"
		rm -rf "$venv"
	fi
	if [ ! -x "$venv/bin/python" ]; then
		say "venv: creating $venv with $PYTHON"
		"$PYTHON" -m venv "$venv"
	fi
	local spec=$PACKAGE
	local -a args=(--disable-pip-version-check --no-input --quiet)
	if [ -n "$WHEELHOUSE" ]; then
		[ -d "$WHEELHOUSE" ] || die "--wheelhouse $WHEELHOUSE is not a directory"
		args+=(--no-index --find-links "$(cd "$WHEELHOUSE" && pwd)")
		spec=${spec:-$NAME}
	elif [ -z "$spec" ] && [ -f "$SRC_DIR/pyproject.toml" ]; then
		spec=$SRC_DIR
	fi
	spec=${spec:-$NAME}
	args+=("${PIP_INDEX_ARGS[@]}")
	say "venv: pip install $spec${WHEELHOUSE:+ (offline, from $WHEELHOUSE)}"
	"$venv/bin/python" -m pip install "${args[@]}" --upgrade "$spec" ||
		die "pip could not install $spec; with no internet use --wheelhouse DIR, behind a mirror --index-url URL"
	"$venv/bin/$NAME" version >/dev/null || die "$venv/bin/$NAME does not run"
	# the live view (`training-node-agent top`) draws with rich, the [top] extra; the daemon never
	# imports it. The agent runs without it, so a source that lacks rich costs only the view. Apart
	# from --package's SPEC, so that any SPEC (a pinned version, a wheel file) gets it the same way
	if "$venv/bin/python" -m pip install "${args[@]}" "${NAME}[top]"; then
		say "venv: the [top] extra (rich, for training-node-agent top) installed"
	else
		say "venv: could not install the [top] extra; the agent runs, and training-node-agent top needs: $PREFIX/bin/python -m pip install '${NAME}[top]'"
	fi
	say "venv: $("$venv/bin/$NAME" version | head -1) installed in $venv"
}

# check-config on a config file, its errors on stderr. Under --root the config names the live
# web_config path (/etc/...), so a copy naming the staged one is checked instead.
check_config() {
	local conf=$1 out rc=0 tmp=
	if [ -n "$R" ]; then
		tmp=$(mktemp)
		sed "s#^web_config = \"/#web_config = \"$R/#" "$conf" >"$tmp"
		conf=$tmp
	fi
	out=$("$R$PREFIX/bin/$NAME" check-config --config "$conf" 2>&1 >/dev/null) || rc=$?
	[ -n "$tmp" ] && rm -f "$tmp"
	[ "$rc" = 0 ] || printf '%s\n' "$out" >&2
	return "$rc"
}

# One config, never clobbered: fresh install -> the default; unchanged default -> the new default;
# edited -> kept, the new default goes beside it as agent.toml.new.
install_config() {
	local src=${CONFIG_SRC:-$SRC_DIR/configs/agent.toml}
	[ -f "$src" ] || die "default config $src not found (run install.sh from the release tree, or pass --config FILE)"
	local dir=$R$CONF_DIR dst=$R$CONF_DIR/agent.toml dist=$R$DIST_COPY
	install -d -m 0755 "$dir"
	install -d -m 0700 "$dir/credentials" # LoadCredential= source: must exist
	local ids group=0
	ids=$(owner_ids 2>/dev/null || true)
	[ -n "$ids" ] && group=${ids#*:}
	if [ ! -e "$dst" ]; then
		install -m 0640 -g "$group" "$src" "$dst"
		say "config: wrote $CONF_DIR/agent.toml"
	elif cmp -s "$dst" "$src"; then
		say "config: $CONF_DIR/agent.toml is the current default"
		rm -f "$dst.new"
	elif [ -f "$dist" ] && cmp -s "$dst" "$dist"; then
		install -m 0640 -g "$group" "$src" "$dst"
		rm -f "$dst.new"
		say "config: $CONF_DIR/agent.toml was the previous default; replaced with the new default"
	else
		install -m 0640 -g "$group" "$src" "$dst.new"
		say "config: $CONF_DIR/agent.toml has local edits; kept it, new default written to agent.toml.new"
	fi
	install -d -m 0755 "$(dirname "$dist")"
	install -m 0644 "$src" "$dist"
	# an upgrade may no longer accept an old edited config: say so now, not at the next restart
	if ! check_config "$dst"; then
		die "$CONF_DIR/agent.toml is not valid for this version (see above); fix it, then run install.sh again"
	fi
}

create_state_dir() {
	install -d -m 0750 "$R$STATE_DIR"
	local ids
	ids=$(owner_ids 2>/dev/null || true)
	if [ -n "$ids" ] && [ "$(id -u)" = 0 ]; then
		chown "$ids" "$R$STATE_DIR"
	fi
	say "state: $STATE_DIR"
}

install_unit() {
	local src=$SRC_DIR/systemd/$NAME.service
	[ -f "$src" ] || die "unit file $src not found (run install.sh from the release tree)"
	install -d -m 0755 "$R$UNIT_DIR"
	local tmp
	tmp=$(mktemp)
	# the shipped unit runs /opt/training-node-agent; follow --prefix
	sed "s#^ExecStart=/opt/$NAME/bin/$NAME #ExecStart=$PREFIX/bin/$NAME #" "$src" >"$tmp"
	if cmp -s "$tmp" "$R$UNIT" 2>/dev/null; then
		rm -f "$tmp"
		say "unit: $UNIT is current"
	else
		install -m 0644 "$tmp" "$R$UNIT"
		rm -f "$tmp"
		say "unit: installed $UNIT"
	fi
}

how_to_start() {
	cat <<EOF

systemd is not managing this system${R:+ (staged into $ROOT)}, so the agent was not started.
On a systemd host:     systemctl enable --now $NAME
Without systemd (containers), as the service user with only CAP_KILL:
  install -d -o $NAME -g $NAME -m 0750 /run/$NAME
  setpriv --reuid=$NAME --regid=$NAME --init-groups --inh-caps=+kill --ambient-caps=+kill \\
      --bounding-set=-all,+kill $PREFIX/bin/$NAME run --config $CONF_DIR/agent.toml
EOF
}

# --- web config (TLS + basic auth for the metrics port) -----------------------------------------------

node_sans() {
	# the names and addresses Prometheus may use for this node
	local host fqdn ip sans
	host=$(hostname 2>/dev/null || echo localhost)
	sans="DNS:$host,DNS:localhost,IP:127.0.0.1"
	fqdn=$(hostname -f 2>/dev/null || true)
	[ -n "$fqdn" ] && [ "$fqdn" != "$host" ] && sans="$sans,DNS:$fqdn"
	for ip in $(hostname -I 2>/dev/null || true); do
		case "$ip" in *:*) ;; *) sans="$sans,IP:$ip" ;; esac
	done
	printf '%s' "$sans"
}

make_web_files() {
	local dir=$1 group=$2 sans tmp password hash
	sans=$(node_sans)
	tmp=$(mktemp -d)
	# P-256: every Prometheus speaks it, and a handshake costs a fraction of RSA's
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/agent.key" 2>/dev/null ||
		die "openssl could not make a key"
	if [ -n "$WEB_CA_CERT" ]; then
		openssl req -new -key "$tmp/agent.key" -subj "/CN=$(hostname)" -out "$tmp/agent.csr" 2>/dev/null
		printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$sans" >"$tmp/ext"
		openssl x509 -req -in "$tmp/agent.csr" -CA "$WEB_CA_CERT" -CAkey "$WEB_CA_KEY" -CAcreateserial \
			-CAserial "$tmp/ca.srl" -days "$WEB_DAYS" -extfile "$tmp/ext" -out "$tmp/agent.crt" 2>/dev/null ||
			die "openssl could not sign the certificate with $WEB_CA_CERT"
	else
		openssl req -x509 -key "$tmp/agent.key" -subj "/CN=$(hostname)" -days "$WEB_DAYS" \
			-addext "subjectAltName=$sans" -addext "extendedKeyUsage=serverAuth" \
			-out "$tmp/agent.crt" 2>/dev/null || die "openssl could not make the certificate"
	fi
	if [ -n "$WEB_PASSWORD_FILE" ]; then
		password=$(head -n1 "$WEB_PASSWORD_FILE") || die "cannot read $WEB_PASSWORD_FILE"
		[ -n "$password" ] || die "$WEB_PASSWORD_FILE is empty"
	else
		password=$(openssl rand -base64 32 | tr -d '/+=\n' | cut -c1-24)
	fi
	# on stdin, never an argument: ps and shell history must not see it
	hash=$(printf '%s\n' "$password" | "$R$PREFIX/bin/$NAME" hash-password --cost 10) ||
		die "could not hash the password"
	install -d -m 0750 -g "$group" "$dir"
	install -m 0644 "$tmp/agent.crt" "$dir/agent.crt"
	install -m 0640 -g "$group" "$tmp/agent.key" "$dir/agent.key"
	(umask 077 && printf '%s\n' "$password" >"$dir/$WEB_USER.password")
	{
		echo "# TLS and basic auth for the metrics port, in the Prometheus exporter-toolkit web-config"
		echo "# format (written by install.sh --web-config; see docs/security.md). Re-read on change and"
		echo "# on SIGHUP. Relative file names are relative to this file."
		echo "tls_server_config:"
		echo "  cert_file: web/agent.crt"
		echo "  key_file: web/agent.key"
		echo "  min_version: TLS12"
		echo "http_server_config:"
		echo "  headers:"
		echo "    X-Content-Type-Options: nosniff"
		echo "    X-Frame-Options: deny"
		echo "basic_auth_users:"
		echo "  $WEB_USER: '$hash'"
	} >"$tmp/web.yml"
	install -m 0640 -g "$group" "$tmp/web.yml" "$R$CONF_DIR/web.yml"
	rm -rf "$tmp"
	say "web config: wrote $CONF_DIR/web.yml and the certificate $CONF_DIR/web/agent.crt for $sans"
	say "web config: the password of $WEB_USER is in $CONF_DIR/web/$WEB_USER.password (root only)"
}

write_web_config() {
	command -v openssl >/dev/null 2>&1 || die "--web-config needs the openssl command (apt-get/dnf install openssl)"
	local ids group=0 conf=$R$CONF_DIR/agent.toml path=$CONF_DIR/web.yml
	ids=$(owner_ids 2>/dev/null || true)
	[ -n "$ids" ] && group=${ids#*:}
	if [ -f "$R$path" ]; then
		say "web config: $path exists; kept (remove it and $CONF_DIR/web/ for a new certificate and password)"
	else
		make_web_files "$R$CONF_DIR/web" "$group"
	fi
	if grep -q "^web_config = \"$path\"" "$conf"; then
		:
	elif grep -q '^web_config = ""' "$conf"; then
		sed -i "s#^web_config = \"\"#web_config = \"$path\"#" "$conf"
		say "config: [http] web_config = \"$path\" in $CONF_DIR/agent.toml"
	else
		say "config: $CONF_DIR/agent.toml names another web_config; set [http] web_config = \"$path\" to use this one"
	fi
	check_config "$conf" || die "the web config does not load (see above)"
	print_scrape_config
}

print_scrape_config() {
	local ca_hint="a copy of $CONF_DIR/web/agent.crt from this node (self-signed)" target
	[ -n "$WEB_CA_CERT" ] && ca_hint="your CA: $WEB_CA_CERT"
	target=$(hostname -I 2>/dev/null | awk '{print $1}')
	cat <<EOF

# Prometheus scrape_config for this node. The password is in $CONF_DIR/web/$WEB_USER.password here;
# put it in the password_file on the Prometheus host.
scrape_configs:
  - job_name: training-node-agent
    scheme: https
    tls_config:
      ca_file: /etc/prometheus/training-node-agent-ca.crt  # $ca_hint
    basic_auth:
      username: $WEB_USER
      password_file: /etc/prometheus/training-node-agent.password
    static_configs:
      - targets: ["${target:-$(hostname)}:9477"]

EOF
}

enable_and_start() {
	if live_systemd; then
		systemctl daemon-reload
		systemctl enable --quiet "$NAME.service"
		say "unit: enabled"
		if [ "$START" = 0 ]; then
			say "not started (--no-start); start with: systemctl start $NAME"
			return
		fi
		systemctl restart "$NAME.service" || true
		if systemctl is-active --quiet "$NAME.service"; then
			say "service: running; status: systemctl status $NAME; metrics: curl -s localhost:9477/metrics"
		else
			systemctl status --no-pager "$NAME.service" >&2 || true
			die "the service did not start; see: journalctl -u $NAME -e"
		fi
		return
	fi
	if command -v systemctl >/dev/null 2>&1; then
		if systemctl --root="$ROOT" enable --quiet "$NAME.service" 2>/dev/null; then
			say "unit: enabled (offline, in $ROOT)"
		else
			say "unit: could not enable offline; enable it on first boot: systemctl enable $NAME"
		fi
	fi
	[ "$START" = 1 ] && how_to_start
	return 0
}

do_install() {
	find_python
	check_venv_module
	say "python: $PYTHON ($("$PYTHON" -c 'import platform; print(platform.python_version())'))"
	create_user
	pip_install
	install_config
	create_state_dir
	if [ "$WEB_CONFIG" = 1 ]; then write_web_config; fi
	install_unit
	enable_and_start
	say "done"
}

# --- uninstall ----------------------------------------------------------------------------------------

do_uninstall() {
	if live_systemd; then
		systemctl disable --now --quiet "$NAME.service" 2>/dev/null || true
	elif command -v systemctl >/dev/null 2>&1 && [ -f "$R$UNIT" ]; then
		systemctl --root="$ROOT" disable --quiet "$NAME.service" 2>/dev/null || true
	fi
	rm -f "$R$UNIT" "$R$UNIT_DIR/multi-user.target.wants/$NAME.service"
	live_systemd && systemctl daemon-reload
	say "unit: removed"
	rm -rf "${R:?}$PREFIX"
	say "venv: removed $PREFIX"
	if [ "$PURGE" = 1 ]; then
		rm -rf "${R:?}$CONF_DIR" "${R:?}$STATE_DIR" "$R/run/$NAME"
		say "purged $CONF_DIR and $STATE_DIR"
		if user_exists; then
			local args
			mapfile -t args < <(shadow_root_args)
			userdel "${args[@]}" "$NAME" && say "user: removed $NAME"
		fi
		if group_exists; then
			local args
			mapfile -t args < <(shadow_root_args)
			groupdel "${args[@]}" "$NAME" 2>/dev/null || true
		fi
	else
		say "kept $CONF_DIR and $STATE_DIR (remove them with --uninstall --purge)"
	fi
	say "done"
}

case "$ACTION" in
install) do_install ;;
uninstall) do_uninstall ;;
esac
