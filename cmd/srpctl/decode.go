package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newDecodeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "decode",
		Short: "decode one SRP information unit",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("decode: not built yet")
		},
	}
}
