module github.com/foldstream/foldstream

go 1.26.0

require (
	github.com/evanphx/json-patch/v5 v5.9.11
	github.com/invopop/jsonschema v0.14.0
	github.com/santhosh-tekuri/jsonschema/v5 v5.3.1
)

require (
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/buger/jsonparser v1.1.2 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.1 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.2 // indirect
)
