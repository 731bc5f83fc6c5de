module github.com/quorumlock/redlock

go 1.25.0

require (
	github.com/gomodule/redigo v1.9.3
	github.com/hashicorp/go-multierror v1.1.1
)

require (
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
