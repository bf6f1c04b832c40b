package resp

func zsetCommands() []*command { return nil }
