package resp

func listCommands() []*command { return nil }
