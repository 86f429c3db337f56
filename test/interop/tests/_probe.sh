#!/bin/bash
# timeout: 900
. /gosrp/suite/guest/lib.sh
siw_up
lio_start 256 siw0
guid=$(lio_guid)
lio=$(srp_login siw0 "$(srp_string siw0 "$guid" "$guid" "[$SIW_IP6]:$LIO_PORT")") || die "login to LIO"
sg=$(sg_of $lio); echo "$lio $sg"
s=$SECONDS
timeout 600 iscsi-test-cu --dataloss -t 'SCSI.Inquiry,SCSI.Mandatory,SCSI.ModeSense6,SCSI.NoMedia,SCSI.Prefetch10,SCSI.Prefetch16,SCSI.PreventAllow,SCSI.Read6,SCSI.Read10,SCSI.Read12,SCSI.Read16,SCSI.ReadCapacity10,SCSI.ReadCapacity16,SCSI.ReadDefectData10,SCSI.ReadDefectData12,SCSI.ReportSupportedOpcodes,SCSI.StartStopUnit,SCSI.TestUnitReady,SCSI.Unmap,SCSI.Write10,SCSI.Write12,SCSI.Write16,SCSI.WriteVerify10,SCSI.WriteVerify12,SCSI.WriteVerify16,SCSI.CompareAndWrite,SCSI.OrWrite,SCSI.GetLBAStatus,SCSI.Reserve6,SCSI.PrinReadKeys,SCSI.PrinServiceactionRange,SCSI.PrinReportCapabilities,SCSI.ProutRegister,SCSI.ProutReserve,SCSI.ProutClear,SCSI.ProutPreempt' "$sg" >"$RUN/testcu.log" 2>&1
echo "exit $? after $((SECONDS-s))"
grep -c 'Test:' $RUN/testcu.log
grep -c 'FAILED' $RUN/testcu.log
