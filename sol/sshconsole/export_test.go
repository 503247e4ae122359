package sshconsole

// EncoderOf exposes a vendor's encoder to the fuzz test: a
// function that appends the encoding of p to dst, its state kept across
// calls.
func EncoderOf(vendor string) func(dst, p []byte) []byte {
	p, _ := Lookup(vendor)
	e := newEncoder(p)
	return e.encode
}
