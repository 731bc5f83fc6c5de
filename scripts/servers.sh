#!/usr/bin/env bash
# servers.sh: installs each server build of the test matrix under .servers/
# (REDLOCK_SERVERS_DIR overrides) and prints one line per build:
#
#	NAME VERSION PATH
#
# PATH runs as redis-server does (same flags, --sentinel included). Builds:
#
#	redis  7.0  Debian 12's redis-server (installed with apt-get if missing)
#	valkey 8.0  valkey-server from bookworm-backports
#	redis  8.0  Debian 13 "trixie" redis-server
#	valkey 8.1  Debian 13 "trixie" valkey-server
#
# The backports and trixie packages are fetched with apt-get download through
# a private apt configuration under .servers/apt, so the machine's own apt
# sources are never switched; they are unpacked with dpkg-deb -x. A trixie
# binary needs trixie's C library, so its wrapper starts it through trixie's
# own ld-linux-x86-64.so.2 with --library-path pointing at the unpacked
# libraries (ldd names them; see TRIXIE_LIBS).
#
# Pins: each build pins its upstream server version (the *_PIN variables
# below); any Debian revision of that version is taken, so a security update
# of the same upstream release does not break the matrix. If the archive no
# longer has the pinned version the script fails and names the versions it
# does have; to bump, change the pin here and the table in docs/drivers.md.
#
# Idempotent: a build already installed with the same pin is only checked
# (its binary must answer --version), which takes well under a second.
set -euo pipefail

REDIS70_PIN=7.0
VALKEY80_PIN=8.0.1
REDIS80_PIN=8.0.2
VALKEY81_PIN=8.1.1
# Shared libraries of trixie that the trixie binaries load (ldd of
# redis-server 8.0 and valkey-server 8.1, plus what those libraries load).
TRIXIE_LIBS="libc6 libstdc++6 libgcc-s1 libssl3t64 libsystemd0 libjemalloc2 liblzf1 libatomic1 libcap2 zlib1g libzstd1"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${REDLOCK_SERVERS_DIR:-$ROOT/.servers}
APTDIR=$DIR/apt
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
mkdir -p "$DIR"

say() { echo "servers.sh: $*" >&2; }
die() { say "$*"; exit 1; }

APT_OPTS=(
	-o "Dir::Etc::sourcelist=$APTDIR/sources.list"
	-o "Dir::Etc::sourceparts=$APTDIR/sources.list.d"
	-o "Dir::Etc::preferencesparts=$APTDIR/preferences.d"
	-o "Dir::State::Lists=$APTDIR/lists"
	-o "Dir::Cache=$APTDIR/cache"
	-o "APT::Default-Release="
	-o "Debug::NoLocking=1"
	-o "APT::Sandbox::User=root"
)
apt_ready=
# apt_private_update builds the private apt configuration (bookworm-backports
# and trixie, signed by the keys of Debian's archive keyring) and fetches its
# package lists, once per run.
apt_private_update() {
	[ -n "$apt_ready" ] && return
	mkdir -p "$APTDIR"/{lists/partial,cache/archives/partial,sources.list.d,preferences.d}
	local key=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -r "$key" ] || die "$key is missing (apt-get install debian-archive-keyring)"
	cat >"$APTDIR/sources.list" <<SRC
deb [signed-by=$key] http://deb.debian.org/debian bookworm-backports main
deb [signed-by=$key] http://deb.debian.org/debian trixie main
deb [signed-by=$key] http://deb.debian.org/debian-security trixie-security main
SRC
	say "fetching the package lists of bookworm-backports and trixie (private apt dir $APTDIR)"
	apt-get "${APT_OPTS[@]}" -qq update >&2 || die "apt-get update of the private lists failed"
	apt_ready=1
}

# pick_version PKG SUITE [PIN]: the newest version of PKG in SUITE (and its
# -security suite) whose upstream version starts with PIN.
pick_version() {
	local pkg=$1 suite=$2 pin=${3:-}
	local v
	v=$(apt-cache "${APT_OPTS[@]}" madison "$pkg" | awk -F' *[|] *' -v s=" $suite" -v pin="$pin" '
		index($3, s "/") || index($3, s "-security/") {
			up = $2; sub(/^[0-9]+:/, "", up)
			# the pin, then no further digit: 8.0.1 takes 8.0.1+dfsg1-1, not 8.0.10
			if (pin == "" || index(up, pin) == 1 && substr(up, length(pin) + 1, 1) !~ /[0-9]/) { print $2; exit }
		}')
	if [ -z "$v" ]; then
		say "no $pkg ${pin:+$pin }in $suite; the archive has:"
		apt-cache "${APT_OPTS[@]}" madison "$pkg" >&2 || true
		die "bump the pin in scripts/servers.sh (and docs/drivers.md)"
	fi
	echo "$v"
}

# download DEST PKG=VERSION...: apt-get download into DEST.
download() {
	local dest=$1; shift
	mkdir -p "$dest"
	(cd "$dest" && apt-get "${APT_OPTS[@]}" -qq download "$@" >&2) || die "apt-get download $* failed"
}

# stamp NAME PIN: prints the installed build's line if it is there, with the
# same pin, and its binary runs.
stamp_ok() {
	local name=$1 pin=$2 f=$DIR/$1/stamp
	[ -f "$f" ] || return 1
	local line spin
	spin=$(sed -n 1p "$f"); line=$(sed -n 2p "$f")
	[ "$spin" = "pin $pin" ] || return 1
	"${line##* }" --version >/dev/null 2>&1 || return 1
	echo "$line"
}

server_version() { "$1" --version | sed -n 's/.* v=\([0-9.]*\).*/\1/p'; }

write_stamp() {
	local name=$1 pin=$2 path=$3 v
	v=$(server_version "$path") || true
	[ -n "$v" ] || die "$path does not run: $("$path" --version 2>&1 | head -3)"
	printf 'pin %s\n%s %s %s\n' "$pin" "${name%-*}" "$v" "$path" >"$DIR/$name/stamp"
	sed -n 2p "$DIR/$name/stamp"
}

# redis 7.0: Debian 12's own package, installed system-wide as make deps does.
redis70() {
	if ! command -v redis-server >/dev/null 2>&1; then
		say "installing Debian's redis-server"
		$SUDO apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >&2
	fi
	local p v
	p=$(command -v redis-server); v=$(server_version "$p")
	case $v in "$REDIS70_PIN" | "$REDIS70_PIN".*) ;; *) die "redis-server on PATH is $v, not $REDIS70_PIN.x (Debian 12's)";; esac
	echo "redis $v $p"
}

# valkey 8.0: bookworm-backports' valkey-server, unpacked. It is built for
# Debian 12's C library, so the system loader runs it; libraries the machine
# lacks (ldd says "not found") are unpacked from bookworm next to it.
valkey80() {
	local name=valkey-8.0 pin=$VALKEY80_PIN
	stamp_ok $name $pin && return
	apt_private_update
	local d=$DIR/$name v
	rm -rf "$d"; mkdir -p "$d/root"
	v=$(pick_version valkey-server bookworm-backports $pin)
	download "$d/debs" "valkey-server=$v" "valkey-tools=$v"
	for deb in "$d"/debs/*.deb; do dpkg-deb -x "$deb" "$d/root"; done
	local bin=$d/root/usr/bin/valkey-server missing lib
	[ -e "$bin" ] || die "no usr/bin/valkey-server in valkey-tools $v"
	missing=$(ldd "$bin" | awk '/not found/ {print $1}')
	for lib in $missing; do
		local pkg
		pkg=$(dpkg -S "*/$lib" 2>/dev/null | head -1 | cut -d: -f1) || true
		[ -n "$pkg" ] || pkg=$(apt-cache "${APT_OPTS[@]}" search --names-only "^${lib%%.so*}[0-9t]*$" | head -1 | cut -d' ' -f1)
		[ -n "$pkg" ] || die "cannot tell which package has $lib"
		say "valkey 8.0 needs $lib: unpacking $pkg"
		(cd "$d/debs" && apt-get "${APT_OPTS[@]}" -qq download "$pkg" >&2) || $SUDO apt-get install -y -qq "$pkg" >&2
	done
	for deb in "$d"/debs/*.deb; do dpkg-deb -x "$deb" "$d/root"; done
	cat >"$d/valkey-server" <<'W'
#!/bin/sh
# valkey-server 8.0 from bookworm-backports, unpacked by scripts/servers.sh.
R=$(dirname "$(readlink -f "$0")")/root
LD_LIBRARY_PATH="$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$R/usr/bin/valkey-server" "$@"
W
	chmod +x "$d/valkey-server"
	write_stamp $name $pin "$d/valkey-server"
}

# trixie NAME PKG BIN PIN: a Debian 13 server (PKG is its -tools package,
# which has the binary; the -server package has the command's name) with trixie's libraries,
# started through trixie's dynamic loader.
trixie() {
	local name=$1 pkg=$2 bin=$3 pin=$4
	stamp_ok "$name" "$pin" && return
	apt_private_update
	local d=$DIR/$name v lib specs=()
	rm -rf "$d"; mkdir -p "$d/root"
	v=$(pick_version "$pkg" trixie "$pin")
	specs+=("$pkg=$v" "${pkg%-tools}-server=$v")
	for lib in $TRIXIE_LIBS; do specs+=("$lib=$(pick_version "$lib" trixie)"); done
	download "$d/debs" "${specs[@]}"
	for deb in "$d"/debs/*.deb; do dpkg-deb -x "$deb" "$d/root"; done
	local ld
	ld=$(cd "$d/root" && ls usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 2>/dev/null | head -1 || true)
	[ -n "$ld" ] || die "no ld-linux-x86-64.so.2 in trixie's libc6"
	local real
	real=$(cd "$d/root/usr/bin" && readlink "$bin" || true)
	[ -n "$real" ] || real=$bin
	[ -e "$d/root/usr/bin/$real" ] || die "no usr/bin/$bin in $pkg $v"
	cat >"$d/$bin" <<W
#!/bin/sh
# $bin $v from Debian 13 (trixie), unpacked by scripts/servers.sh, run by
# trixie's own dynamic loader on trixie's libraries.
R=\$(dirname "\$(readlink -f "\$0")")/root
L="\$R/usr/lib/x86_64-linux-gnu:\$R/lib/x86_64-linux-gnu"
exec "\$R/$ld" --library-path "\$L" --argv0 "\$0" "\$R/usr/bin/$real" "\$@"
W
	chmod +x "$d/$bin"
	# Every library the binary loads must come from trixie's set.
	local notfound
	notfound=$("$d/root/$ld" --list --library-path "$d/root/usr/lib/x86_64-linux-gnu:$d/root/lib/x86_64-linux-gnu" "$d/root/usr/bin/$real" | awk '/not found/ {print $1}')
	[ -z "$notfound" ] || die "$name: libraries not in TRIXIE_LIBS: $notfound"
	write_stamp "$name" "$pin" "$d/$bin"
}

redis70
valkey80
trixie redis-8.0 redis-tools redis-server $REDIS80_PIN
trixie valkey-8.1 valkey-tools valkey-server $VALKEY81_PIN
