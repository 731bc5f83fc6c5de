package redlock

// WithoutIntent makes m's writers leave no intent mark while they wait, so
// that tests can measure the starvation the mark prevents.
func WithoutIntent(m *RWMutex) *RWMutex {
	m.noIntent = true
	return m
}
