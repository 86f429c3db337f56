module github.com/gosrp/gosrp

go 1.26
