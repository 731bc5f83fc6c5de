package redlock

// WithoutIntent makes m's writers leave no intent mark while they wait, so
// that tests can measure the starvation the mark prevents.
func WithoutIntent(m *RWMutex) *RWMutex {
	m.noIntent = true
	return m
}

// RWNames names the keys of the RW lock on key (rwmutex.go).
func RWNames(key string) (writer, readers, intent string) { return rwNames(key) }

// RWQueueNames names the waiting and entitled readers' sets of the RW
// lock on key (rwmutex.go).
func RWQueueNames(key string) (waiting, entitled string) {
	w, _, _ := rwNames(key)
	return rwQueueNames(w)
}
