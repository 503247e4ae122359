#!/usr/bin/env bash
# Records a full-screen program's output for the fixture tests, with the
# screen tmux (another terminal emulator) shows for it as the expected one.
# Not run by the tests: they read what it wrote. Needs tmux and the program.
#
#   record.sh NAME 'COMMAND' [KEYS...]
#
# writes NAME.out (the program's bytes, as a serial console would carry
# them), NAME.screen (tmux's text of the screen, trailing spaces trimmed)
# and NAME.cursor ("row col", 0-based). Each KEYS argument is sent with
# tmux send-keys after a pause (e.g. Down, Tab, Enter).
set -euo pipefail
cd "$(dirname "$0")"
name=$1 cmd=$2
shift 2
sock=obmd-record-$$
rm -f "$name.out"
tmux -u -L "$sock" -f /dev/null new-session -d -x 80 -y 25 -s rec "sleep 1; $cmd; sleep 30"
tmux -L "$sock" pipe-pane -t rec -o "cat > $PWD/$name.out"
sleep 2
for k in "$@"; do
  tmux -L "$sock" send-keys -t rec "$k"
  sleep 0.5
done
sleep 1
# With -e, tmux marks line drawing with SO ... SI: drawn here
# as the characters they are; other escapes (colours) are dropped.
tmux -u -L "$sock" capture-pane -t rec -p -e | perl -CS -pe '
  my %dec; @dec{split //, q(`abcdefghijklmnopqrstuvwxyz{|}~)} = split //, "\x{25c6}\x{2592}\x{2409}\x{240c}\x{240d}\x{240a}\x{b0}\x{b1}\x{2424}\x{240b}\x{2518}\x{2510}\x{250c}\x{2514}\x{253c}\x{23ba}\x{23bb}\x{2500}\x{23bc}\x{23bd}\x{251c}\x{2524}\x{2534}\x{252c}\x{2502}\x{2264}\x{2265}\x{3c0}\x{2260}\x{a3}\x{b7}";
  my $g = 0; my $o = "";
  for my $p (split /(\x0e|\x0f|\e\[[0-9;:]*[a-zA-Z])/) {
    if ($p eq "\x0e") { $g = 1 } elsif ($p eq "\x0f") { $g = 0 } elsif ($p =~ /^\e/) { }
    else { $p =~ s/([`a-z{|}~])/$dec{$1}/g if $g; $o .= $p }
  }
  $_ = $o; s/ *$//;' > "$name.screen"
tmux -L "$sock" display -p -t rec '#{cursor_y} #{cursor_x}' > "$name.cursor"
tmux -L "$sock" kill-server
