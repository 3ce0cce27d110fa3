module ingot.invalid/harvester-config-check

go 1.24

require github.com/harvester/harvester-installer v1.4.2
