package approval

import (
	"context"
	"errors"
)

var errTODO = errors.New("approval: not implemented yet")

func (s *Service) ask(ctx context.Context, r Request) (Approval, bool, error) {
	return Approval{}, false, errTODO
}
func (s *Service) decide(ctx context.Context, id string, d Decision) (Approval, error) {
	return Approval{}, errTODO
}
func (s *Service) cancel(ctx context.Context, id, reason string) (Approval, error) {
	return Approval{}, errTODO
}
func (s *Service) read(ctx context.Context, id string) (Approval, uint64, error) {
	return Approval{}, 0, errTODO
}
func (s *Service) list(ctx context.Context, f Filter) ([]Approval, error) { return nil, errTODO }
func (s *Service) run(ctx context.Context) error                          { return errTODO }
