package wire

// InputsRequest is the stdin of `wrapper inputs`: the dependencies whose
// collected outputs a task receives from their attempt directories on the
// same node, instead of from the controller.
type InputsRequest struct {
	Copy []NodeInput `json:"copy"`
}

// NodeInput is one dependency's output to copy on the node into
// inputs/<Name>/: the regular files Files names, from the output/ of
// attempt Attempt in the task directory Dir (or in Dir/attempts/<Attempt>/
// when a later attempt moved it aside). Files is the manifest the
// controller recorded when it collected that attempt: a file whose size or
// sha256 differs fails the whole dependency, which the controller then
// sends itself.
type NodeInput struct {
	Name    string      `json:"name"`
	Dir     string      `json:"dir"`
	Attempt int         `json:"attempt"`
	Files   []InputFile `json:"files"`
}

// InputFile is one file of a collected output's manifest.
type InputFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// InputsReply is the reply of `wrapper inputs`: the dependencies copied
// (each verified against its manifest), and why each other one was not.
type InputsReply struct {
	Copied []string          `json:"copied"`
	Failed map[string]string `json:"failed,omitempty"`
	Files  int               `json:"files"`
	Bytes  int64             `json:"bytes"`
}
