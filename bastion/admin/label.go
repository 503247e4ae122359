package admin

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/obmd/obmd/db"
)

// LabelRule is the rule a new node's label follows (ValidNewLabel), as
// error messages and the operator's guide state it.
const LabelRule = `a node label is 1 to 80 characters among ASCII letters, digits, "-", "_" and ".", ` +
	`starting with a letter or a digit (it is the SSH user name: OpenSSH refuses some characters, and shells ` +
	`read others)`

// ValidNewLabel reports why label cannot name a new node, or nil: LabelRule.
// A node registered before the rule (ValidLabel's) keeps its label: every
// route still reads, changes and deletes it.
func ValidNewLabel(label string) error {
	if err := ValidLabel(label); err != nil {
		return fmt.Errorf("%w; %s", err, LabelRule)
	}
	for i := 0; i < len(label); i++ {
		b := label[i]
		alnum := 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
		if !alnum && (i == 0 || b != '-' && b != '_' && b != '.') {
			return fmt.Errorf("label %s is not allowed: %s", quote(label), LabelRule)
		}
	}
	return nil
}

// ValidLabel reports why label cannot name a node, or nil. A label is 1 to
// db.MaxLabelLen (80) bytes of valid UTF-8 with no "/", no control or other
// non-printable character (C0, DEL, C1, Unicode format characters such as
// bidirectional overrides), no white space at either end, and is not "." or
// "..". It is used as an SSH user name and in URL paths, so it must be
// unambiguous in both. The error text quotes the label safely.
func ValidLabel(label string) error {
	switch {
	case label == "":
		return errors.New("label is empty")
	case len(label) > db.MaxLabelLen:
		return fmt.Errorf("label is %d bytes long; the limit is %d", len(label), db.MaxLabelLen)
	case !utf8.ValidString(label):
		return fmt.Errorf("label %s is not valid UTF-8", quote(label))
	case label == "." || label == "..":
		return fmt.Errorf("label %s is reserved", quote(label))
	case strings.Contains(label, "/"):
		return fmt.Errorf("label %s contains \"/\"", quote(label))
	}
	for _, r := range label {
		if unicode.IsControl(r) {
			return fmt.Errorf("label %s contains a control character", quote(label))
		}
		if r != ' ' && !unicode.IsGraphic(r) {
			return fmt.Errorf("label %s contains a non-printable character", quote(label))
		}
	}
	first, _ := utf8.DecodeRuneInString(label)
	last, _ := utf8.DecodeLastRuneInString(label)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return fmt.Errorf("label %s starts or ends with white space", quote(label))
	}
	return nil
}
