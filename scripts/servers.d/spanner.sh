# shellcheck shell=bash
# --- The Cloud Spanner emulator ---------------------------------------------
# Google's emulator comes with the machine image (Debian package
# google-cloud-cli-spanner-emulator), whose apt source is not reachable
# here: if it is missing, say so and stop, never fall back to a fake.
server emulator SPANNER 9010

emulator_bin() {
  dpkg -L google-cloud-cli-spanner-emulator 2>/dev/null | grep '/emulator_main$' | head -n 1
}
emulator_install() {
  local bin; bin=$(emulator_bin)
  [ -n "$bin" ] && [ -x "$bin" ] && return 0
  die "the Cloud Spanner emulator is missing: install the Debian package google-cloud-cli-spanner-emulator (from Google Cloud's apt source) and run this again"
}
emulator_start() {
  local p; p=$(port emulator)
  tcp_open "$p" && return 0
  daemon emulator "$(emulator_bin)" --host_port "127.0.0.1:$p"
  wait_for emulator 30 tcp_open "$p"
}
emulator_env() { echo "127.0.0.1:$(port emulator)"; }
