// Package screen is a terminal emulator for a node's console: the screen its output draws.
//
// A BIOS setup over console redirection, a RAID or NIC option ROM, a boot
// menu, an installer (newt, dialog) or top draws with cursor movements and
// then repaints only what changes, so the last bytes a node printed say
// little of what its screen shows. A Terminal is fed the console's output
// (Write) and holds the screen: Text for reading and matching, Snapshot
// for its JSON form, ANSI to redraw it on a viewer's terminal.
//
// What it emulates is the VT100/xterm subset such programs use: cursor
// addressing (CUP, HVP, CUU, CUD, CUF, CUB, CNL, CPL, CHA, HPA, VPA, HPR,
// VPR), DECSC/DECRC and SCOSC/SCORC, erase (ED, EL, ECH, and their
// selective forms as plain ones), ICH, DCH, IL, DL, REP, scroll regions
// (DECSTBM, IND, RI, NEL, SU, SD), origin mode, autowrap with xterm's
// pending wrap, insert mode, tab stops (HT, HTS, TBC, CHT, CBT), SGR (bold,
// dim, italic, underline, blink, reverse, invisible, strike; 8, 16, 256 and
// 24-bit colours in the ';' and ':' forms), erase with the background
// colour (BCE), DEC special graphics and the UK set in G0 and G1 (ESC ( 0,
// ESC ) 0, SO, SI), UTF-8 (wide characters take two cells; combining marks
// are dropped; a character split across writes is kept whole), the
// alternate screen (?47, ?1047, ?1048, ?1049), DECSTR, RIS and DECALN.
// Bytes that are not valid UTF-8 are drawn as code page 437, which is what
// firmware set to the "PC-ANSI" terminal type sends (see utf8Byte). Every
// other control, escape, CSI, OSC, DCS, SOS, PM and APC sequence is parsed
// and ignored; an OSC or DCS string is skipped, never buffered. A Terminal
// never answers a query (DA, DSR): the viewers' terminals get the same
// bytes and answer.
//
// The input is the tenant's: whatever it is, Write never panics, never
// blocks, allocates nothing (but the alternate screen, once), and does at
// most O(n * (cols + rows)) work for n bytes (erasing the screen and
// scrolling move and mark lines instead of clearing cells; REP repeats at
// most a line); a Terminal's memory is fixed by its size (at most two
// buffers of cols*rows cells of 16 bytes: 64 KiB at 80x25, 640 KiB at the
// largest, 200x100). The fuzz targets assert these bounds, that writing
// the same bytes split anywhere gives the same terminal, and that the
// redraw of any screen, fed to a blank terminal, gives the same screen.
//
// Why not a library: github.com/charmbracelet/x/vt (v0.1.0, MIT) was
// evaluated. Its Write blocks when the input holds a query (a cursor
// position report, ESC [ 6 n) until someone reads the reply from an
// unbuffered pipe, so a tenant could stall the reader; each emulator
// allocates a 4 MiB parser buffer and a 10,000-line scrollback (5.2 MiB of
// heap measured at 80x25, 9 MiB at 200x100: 5 GiB for 1,000 nodes); a short
// fuzz run stalled about a minute on one input; it pulls in fifteen
// modules, one of them an unreleased pseudo-version, and its API is pre-1.0;
// its thread-safe wrapper has had a data race. A small state machine
// written for this input, with its bounds fuzzed, costs less than keeping
// such a library safe. Teleport made the same choice with its own copy of
// vt10x after the original crashed on malformed input.
//
// A Terminal is not safe for concurrent use; a Snapshot is an independent
// copy.
package screen
