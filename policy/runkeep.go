package policy

// KeepsRuns reports whether the service's request store keeps runs, so
// that GetRun, ListRuns and EndRun can answer: the admin page shows a
// user's runs only then.
func (s *Service) KeepsRuns() bool {
	_, err := s.runStore()
	return err == nil
}
