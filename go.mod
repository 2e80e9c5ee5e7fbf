module github.com/slacker-dev/slacker

go 1.26.8

require github.com/opencontainers/go-digest v1.0.0
