package approval

// SetHook makes s call h at the named points of its work; an error stops
// it there as if its process died. Set it before s is used.
func SetHook(s *Service, h func(point, id string) error) { s.hook = h }

// Sign is the signature of a link of id, verb and exp.
func Sign(s *Service, id, verb, exp string) string { return s.sign(id, verb, exp) }
