module pushrelay.invalid/peers

go 1.19
