package main
import (
 _ "github.com/gliderlabs/ssh"
 _ "golang.org/x/crypto/ssh"
 _ "github.com/go-sql-driver/mysql"
 _ "github.com/pressly/goose/v3"
 _ "github.com/sirupsen/logrus"
 _ "modernc.org/sqlite"
 _ "github.com/bougou/go-ipmi/pkg/client"
 _ "github.com/creack/pty"
 _ "golang.org/x/sync/errgroup"
 _ "gopkg.in/yaml.v3"
)
func main(){}
