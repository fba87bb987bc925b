package webhook

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

func isNotFound(err error) bool { return errors.Is(err, jetstream.ErrKeyNotFound) }

func isExists(err error) bool { return errors.Is(err, jetstream.ErrKeyExists) }
