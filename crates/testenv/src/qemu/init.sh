#!/bin/busybox sh
# /init of the tests' installer initrd: the first steps of the Harvester installer as a node booted
# by ingot's iPXE script takes them. It configures the NIC named by `ifname=netboot:<mac>` with the
# static `ip=<addr>::<gw>:<mask>::<iface>:off` of the kernel command line, fetches the install
# config from `harvester.install.config_url`, checks it names `install.mode`, `install.device` and
# a SUCCEEDED webhook, calls that webhook, and powers off. Every step prints an `ingot-installer:`
# line on the console; a failure prints `ingot-installer: FAILED: <why>` and powers off too.
# The initrd holds busybox (/bin/busybox) and the NIC's kernel modules in load order (/modules).

/bin/busybox mkdir -p /bin /proc /sys /dev /tmp
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
# The tests read the serial port. When the kernel's console is elsewhere (ingot's script, like
# Harvester's, says console=tty1), the installer's lines go to the serial port as well.
if ! grep -qw ttyS0 /sys/class/tty/console/active 2>/dev/null && [ -c /dev/ttyS0 ]; then
	exec >/dev/ttyS0 2>&1
fi

say() { echo "ingot-installer: $*"; }
fail() {
	say "FAILED: $*"
	poweroff -f
	sleep 60
}

say "started"
for module in /modules/*.ko; do
	[ -e "$module" ] || break
	insmod "$module" || fail "loading the kernel module $module"
done

ip_arg="" ifname_arg="" config_url=""
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	ip=*) ip_arg=${arg#ip=} ;;
	ifname=*) ifname_arg=${arg#ifname=} ;;
	harvester.install.config_url=*) config_url=${arg#harvester.install.config_url=} ;;
	esac
done
[ -n "$ip_arg" ] || fail "no ip= on the kernel command line"
[ -n "$config_url" ] || fail "no harvester.install.config_url= on the kernel command line"

# ip=<client>:<peer>:<gateway>:<netmask>:<hostname>:<interface>:<autoconf> (dracut's static form)
set -f
old_ifs=$IFS
IFS=:
set -- $ip_arg
IFS=$old_ifs
set +f
address=$1 gateway=$3 netmask=$4 iface=$6 autoconf=$7
[ -n "$address" ] && [ -n "$netmask" ] && [ -n "$iface" ] ||
	fail "ip=$ip_arg is not <addr>::<gw>:<mask>::<iface>:off"
[ "$autoconf" = off ] || [ "$autoconf" = none ] || fail "ip=$ip_arg: only static addressing (:off) is played here"

# ifname=<name>:<mac> names the NIC with that MAC.
if [ -n "$ifname_arg" ]; then
	name=${ifname_arg%%:*}
	mac=$(echo "${ifname_arg#*:}" | tr 'A-F' 'a-f')
	found=""
	for i in 1 2 3 4 5 6 7 8 9 10; do
		for dev in /sys/class/net/*; do
			[ "$(cat "$dev/address" 2>/dev/null)" = "$mac" ] && found=${dev##*/}
		done
		[ -n "$found" ] && break
		sleep 1
	done
	[ -n "$found" ] || fail "ifname=$ifname_arg: no NIC has the MAC $mac"
	if [ "$found" != "$name" ]; then
		ip link set dev "$found" name "$name" || fail "renaming $found to $name"
	fi
	say "NIC $mac is $name"
fi
[ -e "/sys/class/net/$iface" ] || fail "ip=$ip_arg names the interface $iface, which does not exist"

ip link set dev lo up
ifconfig "$iface" "$address" netmask "$netmask" up || fail "configuring $address/$netmask on $iface"
if [ -n "$gateway" ]; then
	route add default gw "$gateway" dev "$iface" || fail "adding the default route via $gateway"
fi
say "configured $(ip -o -4 addr show dev "$iface" | awk '{ print $2, $4 }') gateway ${gateway:-none}"

say "fetching the install config $config_url"
tries=0
until wget -q -O /tmp/config.yaml "$config_url"; do
	tries=$((tries + 1))
	[ "$tries" -lt 10 ] || fail "could not fetch the install config $config_url"
	sleep 1
done

# The keys of Harvester's install config that matter here: install.mode, install.device and the
# SUCCEEDED entry of install.webhooks (its method and URL), one `<key> <value>` line each.
awk '
function indent(s) { match(s, /^ */); return RLENGTH }
function value(s) {
	sub(/^[^:]*:[ \t]*/, "", s); sub(/[ \t]+#.*$/, "", s); sub(/[ \t]+$/, "", s)
	gsub(/^["\047]|["\047]$/, "", s); return s
}
function flush() {
	if (event == "SUCCEEDED" && url != "") print "hook", (method == "" ? "PUT" : method), url
	event = method = url = ""
}
/^[ \t]*(#|$)/ { next }
{
	i = indent($0); line = substr($0, i + 1)
	if (i == 0) {
		if (hooks) flush()
		hooks = 0; install = (line ~ /^install:[ \t]*$/); child = -1
		next
	}
	if (!install) next
	if (child < 0) child = i
	if (hooks && (i > child || (i == child && line ~ /^- /))) {
		if (line ~ /^- /) { flush(); line = substr(line, 3); sub(/^ */, "", line) }
		if (line ~ /^event:/) event = value(line)
		else if (line ~ /^method:/) method = value(line)
		else if (line ~ /^url:/) url = value(line)
		next
	}
	if (hooks) { flush(); hooks = 0 }
	if (i != child) next
	if (line ~ /^mode:/) print "mode", value(line)
	else if (line ~ /^device:/) print "device", value(line)
	else if (line ~ /^webhooks:[ \t]*$/) hooks = 1
}
END { if (hooks) flush() }
' /tmp/config.yaml >/tmp/config.keys
mode=$(awk '$1 == "mode" { print $2; exit }' /tmp/config.keys)
device=$(awk '$1 == "device" { print $2; exit }' /tmp/config.keys)
hook_method=$(awk '$1 == "hook" { print $2; exit }' /tmp/config.keys)
hook_url=$(awk '$1 == "hook" { print $3; exit }' /tmp/config.keys)
[ -n "$mode" ] || fail "the install config has no install.mode"
[ -n "$device" ] || fail "the install config has no install.device"
[ -n "$hook_url" ] || fail "the install config has no install.webhooks entry for the SUCCEEDED event"
say "install config: mode $mode, device $device"

# The SUCCEEDED webhook, as the installer calls it when done (busybox wget cannot PUT: nc can).
case "$hook_url" in
http://*) ;;
*) fail "webhook $hook_url: only http:// URLs are played here" ;;
esac
rest=${hook_url#http://}
hostport=${rest%%/*}
path=/
[ "$rest" = "$hostport" ] || path=/${rest#*/}
host=${hostport%:*} port=${hostport##*:}
[ "$host" != "$hostport" ] || port=80
# nc's input stays open until the server has answered and closed: at the end of its input nc
# would half-close the connection, which the installer's own HTTP client never does, and a
# server may drop such a request unanswered (ingot's does).
mkfifo /tmp/hook.request
nc -w 10 "$host" "$port" </tmp/hook.request >/tmp/hook.response &
nc_pid=$!
exec 3>/tmp/hook.request
printf '%s %s HTTP/1.0\r\nHost: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n' \
	"$hook_method" "$path" "$hostport" >&3
wait "$nc_pid"
exec 3>&-
status=$(head -n 1 /tmp/hook.response | tr -d '\r')
case "$status" in
"HTTP/1."?" 2"*) say "webhook SUCCEEDED $hook_method $hook_url: $status" ;;
*) fail "webhook SUCCEEDED $hook_method $hook_url answered '${status:-nothing}'" ;;
esac

say "done, powering off"
poweroff -f
sleep 60
